// SPDX-License-Identifier: Apache-2.0
#pragma once
// SIGINT/SIGTERM end every long-running command (capture, daemon, bench) the same way: a flag polled
// by their loops, set by a handler installed once in the command's main. SIGHUP, likewise, asks the
// daemon to reload.

namespace thptrace {

// True once SIGINT or SIGTERM arrived after install_stop_handlers().
bool stop_requested();
// Installs the handlers without SA_RESTART, so a blocking poll returns EINTR at once.
void install_stop_handlers();
// True once per SIGHUP that arrived after install_reload_handler() (the daemon reads its credential
// files again).
bool take_reload_request();
void install_reload_handler();

}  // namespace thptrace
