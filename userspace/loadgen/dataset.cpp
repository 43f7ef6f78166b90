#include "loadgen/dataset.h"

#include <algorithm>
#include <fmt/format.h>

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
  out.assign("key:");
  fmt::format_to(std::back_inserter(out), "{}", n);
}

void Dataset::value(uint64_t n, std::string& out) const {
  // Mixing the key number through one SplitMix64 step decorrelates neighbouring keys' streams.
  SplitMix64 rng(options_.seed ^ SplitMix64(n).next());
  out.resize(options_.value_size);
  size_t i = 0;
  while (i < out.size()) {
    uint64_t word = rng.next();
    // Byte order fixed explicitly so the dataset does not depend on the host's endianness.
    for (int b = 0; b < 8 && i < out.size(); ++b, ++i) {
      out[i] = static_cast<char>(word & 0xff);
      word >>= 8;
    }
  }
}

LoadReport load_dataset(const ConnectionOptions& connection_options, const Dataset& dataset,
                        const LoadProgress& progress, size_t batch, const std::atomic<bool>* stop) {
  const auto start = std::chrono::steady_clock::now();
  Connection connection = Connection::open(connection_options);
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
      ReplyPtr reply = connection.read_reply();
      if (!reply) throw LoadgenError(connection.error());
      if (is_error_reply(reply.get()) && first_error.empty()) first_error = reply_text(reply.get());
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
