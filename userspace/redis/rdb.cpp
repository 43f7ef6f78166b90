// SPDX-License-Identifier: Apache-2.0
#include "redis/rdb.h"

#include <charconv>
#include <string>
#include <variant>

namespace thptrace::redis {
namespace {

constexpr unsigned char kOpcodeAux = 0xFA;
constexpr size_t kMagicBytes = 9;  // "REDIS" and a four-digit version

// Reads the RDB's length encoding and strings from a bounded view; every read checks what is left.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}
  bool empty() const { return at_ >= s_.size(); }
  std::optional<unsigned char> byte() {
    if (empty()) return std::nullopt;
    return static_cast<unsigned char>(s_[at_++]);
  }
  std::optional<unsigned char> peek() const {
    if (empty()) return std::nullopt;
    return static_cast<unsigned char>(s_[at_]);
  }
  // A length, or the kind of an encoded integer (INT8 = 0, INT16 = 1, INT32 = 2, LZF = 3) with
  // `encoded` set.
  std::optional<uint64_t> length(bool* encoded) {
    const auto b = byte();
    if (!b) return std::nullopt;
    *encoded = false;
    switch (*b >> 6) {
      case 0: return *b & 0x3F;
      case 1: {
        const auto next = byte();
        if (!next) return std::nullopt;
        return (static_cast<uint64_t>(*b & 0x3F) << 8) | *next;
      }
      case 3: *encoded = true; return *b & 0x3F;
      default: break;
    }
    const size_t n = *b == 0x80 ? 4 : *b == 0x81 ? 8 : 0;
    if (n == 0 || s_.size() - at_ < n) return std::nullopt;
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(s_[at_++]);  // big-endian
    return v;
  }
  // A string: its bytes, or the integer it encodes; nullopt when it runs past the end. An LZF string
  // is skipped (its value is not read) and given as "".
  std::optional<std::variant<std::string_view, int64_t>> string() {
    bool encoded = false;
    const auto len = length(&encoded);
    if (!len) return std::nullopt;
    if (encoded) {
      if (*len <= 2) {
        const size_t n = size_t{1} << *len;  // 1, 2 or 4 bytes, little-endian, signed
        if (s_.size() - at_ < n) return std::nullopt;
        uint64_t v = 0;
        for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s_[at_ + i])) << (8 * i);
        at_ += n;
        const unsigned shift = static_cast<unsigned>(64 - 8 * n);
        return static_cast<int64_t>(v << shift) >> shift;
      }
      if (*len != 3) return std::nullopt;
      bool e = false;
      const auto compressed = length(&e);
      if (!compressed || e || !length(&e) || e || s_.size() - at_ < *compressed) return std::nullopt;
      at_ += *compressed;
      return std::string_view();
    }
    if (s_.size() - at_ < *len) return std::nullopt;
    const std::string_view v = s_.substr(at_, *len);
    at_ += *len;
    return v;
  }

 private:
  std::string_view s_;
  size_t at_ = 0;
};

}  // namespace

std::optional<uint64_t> rdb_used_mem(std::string_view head) {
  if (head.size() < kMagicBytes || head.substr(0, 5) != "REDIS") return std::nullopt;
  for (size_t i = 5; i < kMagicBytes; ++i)
    if (head[i] < '0' || head[i] > '9') return std::nullopt;
  Reader r(head.substr(kMagicBytes));
  while (r.peek() == kOpcodeAux) {
    r.byte();
    const auto key = r.string();
    const auto value = r.string();
    if (!key || !value) return std::nullopt;
    const auto* name = std::get_if<std::string_view>(&*key);
    if (!name || *name != "used-mem") continue;
    if (const auto* n = std::get_if<int64_t>(&*value)) return *n >= 0 ? std::optional<uint64_t>(*n) : std::nullopt;
    const auto digits = std::get<std::string_view>(*value);
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

}  // namespace thptrace::redis
