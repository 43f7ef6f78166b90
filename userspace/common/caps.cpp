#include "common/caps.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace thptrace {

bool drop_capabilities_except(const std::vector<int>& keep, std::string* error) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) {
    if (error) *error = std::string("capget: ") + std::strerror(errno);
    return false;
  }
  __user_cap_data_struct kept[_LINUX_CAPABILITY_U32S_3] = {};
  for (const int cap : keep) {
    const unsigned word = static_cast<unsigned>(cap) / 32;
    const uint32_t bit = 1u << (static_cast<unsigned>(cap) % 32);
    if (word >= _LINUX_CAPABILITY_U32S_3) continue;
    // Only what the process holds now can be kept.
    kept[word].permitted |= data[word].permitted & bit;
    kept[word].effective |= data[word].effective & bit;
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::syscall(SYS_capset, &header, kept) != 0) {
    if (error) *error = std::string("capset: ") + std::strerror(errno);
    return false;
  }
  return true;
}

bool set_effective(std::initializer_list<int> caps, bool on) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  for (const int cap : caps) {
    const unsigned word = static_cast<unsigned>(cap) / 32;
    const uint32_t bit = 1u << (static_cast<unsigned>(cap) % 32);
    if (word >= _LINUX_CAPABILITY_U32S_3) continue;
    if (on)
      data[word].effective |= data[word].permitted & bit;
    else
      data[word].effective &= ~bit;
  }
  return ::syscall(SYS_capset, &header, data) == 0;
}

}  // namespace thptrace
