#pragma once
// Dropping capabilities once they are no longer needed. A one-shot capture needs CAP_BPF and
// CAP_PERFMON only to load and attach; afterwards it reads maps and the ring buffer through fds it
// already holds, and /proc of the target.

#include <initializer_list>
#include <string>
#include <vector>

namespace thptrace {

// Keeps only `keep` (CAP_* numbers) in the effective, permitted and inheritable sets, and sets
// no_new_privs. Returns false with *error set when the kernel refuses.
bool drop_capabilities_except(const std::vector<int>& keep, std::string* error);

// Raises or lowers `caps` in the effective set only (the permitted set is left alone, so a lowered
// capability can be raised again). Returns false when the kernel refuses.
bool set_effective(std::initializer_list<int> caps, bool on);

}  // namespace thptrace
