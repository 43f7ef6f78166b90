// SPDX-License-Identifier: Apache-2.0
// The bulk writers: closed-loop connections that keep Redis busy with pipelined batches.

#include "loadgen/workers.h"

namespace thptrace::loadgen::detail {

WriterOutcome run_writer(Connection& connection, const Dataset& dataset, const LoadgenOptions& options, unsigned index,
                         RunState& state) {
  block_sigpipe_on_this_thread();
  connection.use_light_replies();
  WriterOutcome out;
  SplitMix64 rng(stream_seed(dataset.options().seed, index + 1));
  const unsigned batch = std::max(options.batch, 1u);

  std::string resp, key, value;
  while (!state.should_stop() && clock::now() < state.deadline) {
    resp.clear();
    for (unsigned b = 0; b < batch; ++b) {
      const uint64_t n = rng.below(dataset.key_count());
      Dataset::key(n, key);
      if (options.read_only) {
        append_resp_command(resp, {"GET", key});
      } else {
        dataset.value(n, value);
        append_resp_command(resp, {"SET", key, value});
      }
    }

    const auto sent = clock::now();
    if (!connection.append_formatted(resp)) {
      state.fail(connection.error());
      break;
    }
    for (unsigned b = 0; b < batch; ++b) {
      const std::optional<ReplyKind> reply = connection.read_light_reply();
      if (!reply) {
        state.fail(connection.error());
        return out;
      }
      if (*reply == ReplyKind::error && out.error_replies++ == 0) out.first_error_reply = connection.last_error_reply();
    }
    out.batch_latency.record(static_cast<uint64_t>(std::chrono::nanoseconds(clock::now() - sent).count()));
    out.ops += batch;
    state.writer_ops.fetch_add(batch, std::memory_order_relaxed);
  }
  return out;
}

}  // namespace thptrace::loadgen::detail
