// SPDX-License-Identifier: Apache-2.0
#include "common/btf.h"

#include <unistd.h>

#include "common/error.h"

namespace thptrace {

bool vmlinux_btf_present() { return ::access(kVmlinuxBtfPath, R_OK) == 0; }

void require_vmlinux_btf() {
  if (!vmlinux_btf_present()) throw RuntimeError(kNoBtfSentence);
}

}  // namespace thptrace
