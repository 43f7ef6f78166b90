// SPDX-License-Identifier: Apache-2.0
#include "common/signals.h"

#include <atomic>
#include <csignal>

namespace thptrace {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};

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

bool take_reload_request() { return g_reload.exchange(false); }

void install_reload_handler() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_reload = true; };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGHUP, &sa, nullptr);
}

}  // namespace thptrace
