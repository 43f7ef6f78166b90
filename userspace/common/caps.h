// SPDX-License-Identifier: Apache-2.0
#pragma once
// Dropping capabilities once they are no longer needed. A one-shot capture needs CAP_BPF and
// CAP_PERFMON only to load and attach; afterwards it reads maps and the ring buffer through fds it
// already holds, and /proc of the target.
//
// Capabilities, the bounding set included, belong to a thread, and a new thread starts with its
// creator's: a drop in the main thread does nothing for a thread already running. So the main thread
// drops before it starts any thread, and a thread that reads the network (a Redis poller, the HTTP
// server's) is started from a short-lived thread holding less (in_thread_holding).

#include <cstdint>
#include <exception>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

namespace thptrace {

// For the calling thread: clears the bounding set of every capability not in `keep` (while
// CAP_SETPCAP is still held; without it the bounding set is left to whoever started us) and the
// ambient set, keeps only `keep` (CAP_* numbers) in the effective and permitted sets, empties the
// inheritable set and sets no_new_privs. Returns false with *error set when the kernel refuses.
bool drop_capabilities_except(const std::vector<int>& keep, std::string* error);

// For the calling thread: names it (at most 15 bytes are kept) and lowers its permitted set to the
// part of `permitted` it holds, with nothing effective (set_effective raises one where it is needed).
// Returns false with *error set when the kernel refuses.
bool restrict_this_thread(const char* name, const std::vector<int>& permitted, std::string* error);

// Runs make() in a thread of its own that first restrict_this_thread(name, permitted), and returns
// what make() returned (an exception it threw is rethrown here). Every thread make() starts inherits
// that name and those capabilities, and the main thread keeps its own. A failed restriction is
// logged, and make() still runs.
void warn_unrestricted(const char* name, const std::string& why);
template <class Make>
auto in_thread_holding(const char* name, const std::vector<int>& permitted, Make make) -> decltype(make()) {
  decltype(make()) out{};
  std::exception_ptr failed;
  std::thread([&] {
    if (std::string why; !restrict_this_thread(name, permitted, &why)) warn_unrestricted(name, why);
    try {
      out = make();
    } catch (...) {
      failed = std::current_exception();
    }
  }).join();
  if (failed) std::rethrow_exception(failed);
  return out;
}

// Raises or lowers `caps` in the effective set only (the permitted set is left alone, so a lowered
// capability can be raised again). Returns false when the kernel refuses.
bool set_effective(std::initializer_list<int> caps, bool on);

// Raises `caps` in the calling thread's effective set (those it holds permitted) for the scope, and
// puts the effective set back as it was after: for the one call that needs them.
class EffectiveForScope {
 public:
  explicit EffectiveForScope(std::initializer_list<int> caps);
  ~EffectiveForScope();
  EffectiveForScope(const EffectiveForScope&) = delete;
  EffectiveForScope& operator=(const EffectiveForScope&) = delete;

 private:
  uint32_t saved_[2] = {};
  bool raised_ = false;
};

}  // namespace thptrace
