// SPDX-License-Identifier: Apache-2.0
#pragma once
// Whether the running kernel exposes its BTF, which CO-RE relocates every program against: the one
// check behind the capture's, the daemon's and the tracer's start-up failure.

namespace thptrace {

inline constexpr const char* kVmlinuxBtfPath = "/sys/kernel/btf/vmlinux";

// What to tell the operator when it is missing.
inline constexpr const char* kNoBtfSentence =
    "this kernel exposes no BTF (/sys/kernel/btf/vmlinux is missing): thptrace needs a kernel built with "
    "CONFIG_DEBUG_INFO_BTF=y.";

bool vmlinux_btf_present();
// Throws FatalError(kExitRuntime) with the sentence that says what to do when the BTF is missing.
void require_vmlinux_btf();

}  // namespace thptrace
