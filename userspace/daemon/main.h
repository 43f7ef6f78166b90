// SPDX-License-Identifier: Apache-2.0
#pragma once
// `thptrace daemon`: what cli/main.cpp calls, without the daemon's internals.

namespace thptrace::daemon {

// argv[0] is "daemon"; returns the exit status (0, 1 runtime, 2 usage).
int daemon_main(int argc, char** argv);

}  // namespace thptrace::daemon
