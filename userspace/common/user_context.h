// SPDX-License-Identifier: Apache-2.0
#pragma once
// A thread's user context at a sampled copy, as the kernel took it for a DWARF unwind: its user
// registers (struct pt_regs order, x86_64) and the bytes of its stack from sp upward.

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace thptrace {

struct UserContext {
  static constexpr std::size_t kRegs =
      21;  // r15 r14 r13 r12 bp bx r11 r10 r9 r8 ax cx dx si di orig_ax ip cs flags sp ss
  static constexpr std::size_t kIp = 16, kSp = 19;
  std::array<uint64_t, kRegs> regs{};
  std::vector<uint8_t> stack;  // from regs[kSp] upward; empty when none could be read
};

}  // namespace thptrace
