// SPDX-License-Identifier: Apache-2.0
#pragma once
// Boost.Program_options writes the text of an error by substituting the offending token into
// "%name%" placeholders, and never finishes when the token holds such a placeholder itself
// (`--pid %value%`, found by tests/fuzz). parse_command_line() runs a parse and, when it fails, takes
// the message from parsing again a copy whose '%' are '?': it fails the same way and cannot loop.

#include <fmt/format.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace thptrace {

// parse(argc, argv, vm, safe) fills vm and throws boost::program_options::error on bad input; `safe`
// is true on the second run, where any other text it parses (a config file) must have its '%'
// replaced too. Returns the error's message, or nullopt when the parse succeeded.
template <typename Parse>
std::optional<std::string> parse_command_line(Parse&& parse, int argc, const char* const* argv,
                                              boost::program_options::variables_map& vm) {
  try {
    parse(argc, argv, vm, false);
    return std::nullopt;
  } catch (const boost::program_options::error&) {
    // Do not call what() on this one: that is where Boost loops.
  }
  std::vector<std::string> safe(argv, argv + argc);
  for (auto& arg : safe) std::replace(arg.begin(), arg.end(), '%', '?');
  std::vector<const char*> safe_argv;
  for (const auto& arg : safe) safe_argv.push_back(arg.c_str());
  boost::program_options::variables_map scratch;
  try {
    parse(argc, safe_argv.data(), scratch, true);
  } catch (const boost::program_options::error& e) {
    return std::string(e.what());
  }
  return std::string("the command line cannot be parsed");
}

// parse_command_line() for a command line alone (no config file): argv against desc, stored and
// notified into vm. Returns the error's message, or nullopt when the parse succeeded.
inline std::optional<std::string> parse_options(const boost::program_options::options_description& desc, int argc,
                                                const char* const* argv, boost::program_options::variables_map& vm) {
  const auto parse = [&desc](int n, const char* const* args, boost::program_options::variables_map& out,
                             bool /*safe*/) {
    boost::program_options::store(boost::program_options::command_line_parser(n, args).options(desc).run(), out);
    boost::program_options::notify(out);
  };
  return parse_command_line(parse, argc, argv, vm);
}

// The value of option `name` (a long long), or Error("--NAME must be between LO and HI, not V").
template <typename Error>
long long integer_in(const boost::program_options::variables_map& vm, const char* name, long long lo, long long hi) {
  const long long v = vm[name].as<long long>();
  if (v < lo || v > hi) throw Error(fmt::format("--{} must be between {} and {}, not {}", name, lo, hi, v));
  return v;
}

// The same for a double option; NaN and infinities are out of every range.
template <typename Error>
double number_in(const boost::program_options::variables_map& vm, const char* name, double lo, double hi) {
  const double v = vm[name].as<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    throw Error(fmt::format("--{} must be between {:g} and {:g}, not {:g}", name, lo, hi, v));
  return v;
}

}  // namespace thptrace
