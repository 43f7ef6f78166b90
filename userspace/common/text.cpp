// SPDX-License-Identifier: Apache-2.0
#include "common/text.h"

#include <cstddef>
#include <cstdint>

namespace thptrace::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The well-formed sequence starting at s[i]: its length and code point; or, when there is none,
// length 0 and in *bad the bytes of the maximal subpart to replace (at least 1).
struct Decoded {
  size_t length = 0;
  uint32_t code_point = 0;
  size_t bad = 0;
};

Decoded decode(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t lead = b(0);
  if (lead < 0x80) return {1, lead, 0};
  size_t n = 0;
  uint32_t cp = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte (Unicode Table 3-7)
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2, cp = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3, cp = lead & 0x0Fu;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4, cp = lead & 0x07u;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return {0, 0, 1};
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return {0, 0, k};
    const uint8_t c = b(k);
    if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return {0, 0, k};
    cp = (cp << 6) | (c & 0x3Fu);
  }
  return {n, cp, 0};
}

void append_hex(std::string& out, const char* prefix, uint32_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += prefix;
  out += kHex[(v >> 4) & 0xF];
  out += kHex[v & 0xF];
}

// Calls emit(code point, its bytes) for each well-formed sequence and replace() for each
// ill-formed subpart, in order.
template <typename Emit, typename Replace>
void each(std::string_view s, Emit emit, Replace replace) {
  for (size_t i = 0; i < s.size();) {
    const Decoded d = decode(s, i);
    if (d.length) {
      emit(d.code_point, s.substr(i, d.length));
      i += d.length;
    } else {
      replace();
      i += d.bad;
    }
  }
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Decoded d = decode(s, i);
    if (!d.length) return false;
    i += d.length;
  }
  return true;
}

std::string valid_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  each(
      s, [&](uint32_t, std::string_view bytes) { out += bytes; }, [&] { out += kReplacement; });
  return out;
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  each(
      s,
      [&](uint32_t cp, std::string_view bytes) {
        if (cp < 0x20 || cp == 0x7F)
          append_hex(out, "\\x", cp);
        else if (cp >= 0x80 && cp <= 0x9F)
          append_hex(out, "\\u00", cp);
        else
          out += bytes;
      },
      [&] { out += kReplacement; });
  return out;
}

std::string ascii_printable(std::string_view text, size_t max_bytes) {
  std::string out;
  const bool cut = text.size() > max_bytes;
  if (cut) text = text.substr(0, max_bytes);
  out.reserve(text.size() + 3);
  constexpr char kHex[] = "0123456789abcdef";
  for (const unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
      continue;
    }
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  if (cut) out += "...";
  return out;
}

std::string xml_escape(std::string_view s) {
  const std::string visible = printable(s);
  std::string out;
  out.reserve(visible.size());
  each(
      visible,
      [&](uint32_t cp, std::string_view bytes) {
        switch (cp) {
          case '&': out += "&amp;"; break;
          case '<': out += "&lt;"; break;
          case '>': out += "&gt;"; break;
          case '"': out += "&quot;"; break;
          case '\'': out += "&#39;"; break;
          case 0xFFFE:
          case 0xFFFF: out += kReplacement; break;
          default: out += bytes;
        }
      },
      [&] { out += kReplacement; });
  return out;
}

}  // namespace thptrace::text
