// SPDX-License-Identifier: Apache-2.0
#include "common/signals.h"

#include <atomic>
#include <csignal>

namespace thptrace {
namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop = true; }

}  // namespace

bool stop_requested() { return g_stop; }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace thptrace
