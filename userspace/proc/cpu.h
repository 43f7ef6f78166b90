// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host's CPUs and how busy they are: what a new CPU-bound thread (a fork's child) would share.

#include <cstdint>
#include <optional>
#include <string_view>

namespace thptrace::proc {

// procs_running of /proc/stat: the threads running or waiting for a CPU now, the reader included.
std::optional<unsigned> parse_procs_running(std::string_view stat);
std::optional<unsigned> read_procs_running();

// The "some" line's total of /proc/pressure/cpu (PSI, Linux 4.20+ with CONFIG_PSI): µs during which at
// least one runnable thread waited for a CPU. nullopt where the kernel has no PSI.
std::optional<uint64_t> parse_cpu_pressure_some_us(std::string_view pressure);
std::optional<uint64_t> read_cpu_pressure_some_us();

// The CPUs online.
unsigned online_cpus();

}  // namespace thptrace::proc
