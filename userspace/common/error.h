// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one fatal error type: a start-up failure with one sentence that says what is
// wrong and what to do, caught in main() and turned into the exit code of the CLI contract.

#include <stdexcept>
#include <string>

namespace thptrace {

enum ExitCode : int { kExitOk = 0, kExitRuntime = 1, kExitUsage = 2 };

class FatalError : public std::runtime_error {
 public:
  FatalError(ExitCode code, const std::string& sentence) : std::runtime_error(sentence), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// Bad usage or bad input (a flag, an address, a file named on the command line): exit 2.
class UsageError : public FatalError {
 public:
  explicit UsageError(const std::string& sentence) : FatalError(kExitUsage, sentence) {}
};

// A failure at run time (cannot connect, cannot load, cannot write): exit 1.
class RuntimeError : public FatalError {
 public:
  explicit RuntimeError(const std::string& sentence) : FatalError(kExitRuntime, sentence) {}
};

}  // namespace thptrace
