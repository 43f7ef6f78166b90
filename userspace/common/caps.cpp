// SPDX-License-Identifier: Apache-2.0
#include "common/caps.h"

#include <linux/capability.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/log.h"

namespace thptrace {
namespace {

using CapData = __user_cap_data_struct[_LINUX_CAPABILITY_U32S_3];
static_assert(_LINUX_CAPABILITY_U32S_3 == 2, "EffectiveForScope keeps two words");

bool get_caps(CapData data) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  return ::syscall(SYS_capget, &header, data) == 0;
}

// capset(2) with pid 0 changes the calling thread only (the raw syscall; libcap's would too).
bool set_caps(CapData data) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  return ::syscall(SYS_capset, &header, data) == 0;
}

// The part of `caps` the thread holds in its permitted set, with the effective bit where it is
// effective now (effective_too) or nowhere.
void keep_only(const CapData held, const std::vector<int>& caps, bool effective_too, CapData out) {
  for (unsigned w = 0; w < _LINUX_CAPABILITY_U32S_3; ++w) out[w] = {};
  for (const int cap : caps) {
    const unsigned word = static_cast<unsigned>(cap) / 32;
    const uint32_t bit = 1u << (static_cast<unsigned>(cap) % 32);
    if (word >= _LINUX_CAPABILITY_U32S_3) continue;
    out[word].permitted |= held[word].permitted & bit;
    if (effective_too) out[word].effective |= held[word].effective & bit;
  }
}

int last_cap() {
  int last = CAP_LAST_CAP;
  std::ifstream("/proc/sys/kernel/cap_last_cap") >> last;
  return std::clamp(last, 0, 63);
}

// Removes from the bounding set every capability not in keep. Needs CAP_SETPCAP only when there is
// something to remove; without it (a unit that left it out of its own bounding set) nothing is.
std::string clear_bounding_set(const std::vector<int>& keep) {
  for (int cap = 0; cap <= last_cap(); ++cap) {
    if (std::find(keep.begin(), keep.end(), cap) != keep.end()) continue;
    if (::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 1) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) return std::strerror(errno);
  }
  return {};
}

}  // namespace

bool drop_capabilities_except(const std::vector<int>& keep, std::string* error) {
  CapData held = {};
  if (!get_caps(held)) {
    if (error) *error = std::string("capget: ") + std::strerror(errno);
    return false;
  }
  if (const std::string why = clear_bounding_set(keep); !why.empty()) {
    // EPERM: CAP_SETPCAP was not given to us, and whoever did not give it chose our bounding set.
    log::debug("the bounding set is left as it was given (PR_CAPBSET_DROP: {})", why);
  }
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);  // EINVAL before 4.3: none to clear
  CapData kept = {};
  keep_only(held, keep, true, kept);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || !set_caps(kept)) {
    if (error) *error = std::string("capset: ") + std::strerror(errno);
    return false;
  }
  return true;
}

bool restrict_this_thread(const char* name, const std::vector<int>& permitted, std::string* error) {
  char short_name[16] = {};
  std::strncpy(short_name, name, sizeof short_name - 1);
  ::pthread_setname_np(::pthread_self(), short_name);
  CapData held = {};
  CapData kept = {};
  if (!get_caps(held)) {
    if (error) *error = std::string("capget: ") + std::strerror(errno);
    return false;
  }
  keep_only(held, permitted, false, kept);
  if (!set_caps(kept)) {
    if (error) *error = std::string("capset: ") + std::strerror(errno);
    return false;
  }
  return true;
}

void warn_unrestricted(const char* name, const std::string& why) {
  log::warn("could not lower the capabilities of the {} thread ({}); continuing", name, why);
}

bool set_effective(std::initializer_list<int> caps, bool on) {
  CapData data = {};
  if (!get_caps(data)) return false;
  for (const int cap : caps) {
    const unsigned word = static_cast<unsigned>(cap) / 32;
    const uint32_t bit = 1u << (static_cast<unsigned>(cap) % 32);
    if (word >= _LINUX_CAPABILITY_U32S_3) continue;
    if (on)
      data[word].effective |= data[word].permitted & bit;
    else
      data[word].effective &= ~bit;
  }
  return set_caps(data);
}

EffectiveForScope::EffectiveForScope(std::initializer_list<int> caps) {
  CapData data = {};
  if (!get_caps(data)) return;
  for (unsigned w = 0; w < _LINUX_CAPABILITY_U32S_3; ++w) saved_[w] = data[w].effective;
  raised_ = set_effective(caps, true);
}

EffectiveForScope::~EffectiveForScope() {
  CapData data = {};
  if (!raised_ || !get_caps(data)) return;
  for (unsigned w = 0; w < _LINUX_CAPABILITY_U32S_3; ++w) data[w].effective = saved_[w];
  set_caps(data);
}

}  // namespace thptrace
