// SPDX-License-Identifier: Apache-2.0
#include "loadgen/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>

namespace thptrace::loadgen {
namespace {

// Redis' proto-max-bulk-len default.
constexpr size_t max_value_size = size_t{512} * 1024 * 1024;

}  // namespace

Dataset::Dataset(const DatasetOptions& options) : options_(options) {
  if (options_.keys == 0) throw LoadgenError("the dataset needs at least one key (--keys)");
  if (options_.value_size == 0 || options_.value_size > max_value_size)
    throw LoadgenError(fmt::format("the value size must be between 1 and {} bytes (--value-size)", max_value_size));
}

void Dataset::key(uint64_t n, std::string& out) {
  char digits[20];
  const auto end = std::to_chars(std::begin(digits), std::end(digits), n).ptr;
  out.assign("key:");
  out.append(digits, end);
}

void Dataset::value(uint64_t n, std::string& out) const {
  // Mixing the key number through one SplitMix64 step decorrelates neighbouring keys' streams.
  SplitMix64 rng(options_.seed ^ SplitMix64(n).next());
  out.resize(options_.value_size);
  char* p = out.data();
  const size_t whole_words = out.size() / 8;
  // The writers generate a value per SET, so this is their hot loop: a word at a time. Bytes are
  // taken least significant first on any host, so the dataset does not depend on endianness.
  for (size_t w = 0; w < whole_words; ++w, p += 8) {
    uint64_t word = rng.next();
    if constexpr (std::endian::native == std::endian::big) word = __builtin_bswap64(word);
    std::memcpy(p, &word, 8);
  }
  uint64_t tail = rng.next();
  for (size_t i = whole_words * 8; i < out.size(); ++i, tail >>= 8) *p++ = static_cast<char>(tail & 0xff);
}

LoadReport load_dataset(const ConnectionOptions& connection_options, const Dataset& dataset,
                        const LoadProgress& progress, size_t batch, const std::atomic<bool>* stop) {
  const auto start = std::chrono::steady_clock::now();
  Connection connection = Connection::open(connection_options);
  connection.use_light_replies();
  batch = std::max<size_t>(batch, 1);

  std::string resp, key, value;
  const uint64_t total = dataset.key_count();
  uint64_t loaded = 0;
  while (loaded < total) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) break;
    const uint64_t end = std::min<uint64_t>(total, loaded + batch);
    resp.clear();
    for (uint64_t n = loaded; n < end; ++n) {
      Dataset::key(n, key);
      dataset.value(n, value);
      append_resp_command(resp, {"SET", key, value});
    }
    if (!connection.append_formatted(resp)) throw LoadgenError(connection.error());
    // Read every reply of the batch even after an error reply, so the message names the first.
    std::string first_error;
    for (uint64_t n = loaded; n < end; ++n) {
      const std::optional<ReplyKind> reply = connection.read_light_reply();
      if (!reply) throw LoadgenError(connection.error());
      if (*reply == ReplyKind::error && first_error.empty()) first_error = connection.last_error_reply();
    }
    if (!first_error.empty())
      throw LoadgenError(
          fmt::format("Redis at {} refused a SET while loading the dataset: {}", connection.address(), first_error));
    loaded = end;
    if (progress) progress(loaded, total);
  }
  return LoadReport{loaded, std::chrono::steady_clock::now() - start};
}

}  // namespace thptrace::loadgen
