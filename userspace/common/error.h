#pragma once
// The one fatal error type (style.md §7): a start-up failure with one sentence that says what is
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

}  // namespace thptrace
