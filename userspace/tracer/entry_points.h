// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Redis and Valkey functions thptrace puts uprobes on to name a fork's reason: the one table of
// them, which of them a binary gives, and which reasons the uprobes can then label exactly.
//
// Redis 7.2+ and Valkey build with -flto by default: an entry point can be inlined into its caller
// (gone), made local under its own name or a suffixed one (`.lto_priv.0`), or cloned with a changed
// signature (`.constprop.0`, `.isra.0`). Each entry point is decided on its own: a missing one costs
// only the labels that need it, which then come from INFO polling.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace thptrace::tracer {

// Bits of the redis_anchors map (bpf/thptrace.h REDIS_ANCHOR_*): the entry points attached in a
// process. The fork program needs them to tell "not on the stack" from "not attachable".
struct EntryPoint {
  uint32_t anchor;                 // REDIS_ANCHOR_* bit
  std::vector<std::string> names;  // Redis's name, then Valkey's (same function, renamed in Valkey 8)
  bool reads_argument;             // its uprobe reads an argument: a clone with another signature will not do
  const char* tells;               // what its presence on the stack says, for `thptrace probe`
};

// The table, most robust anchor first: redisFork/serverFork is called by every fork path and carries
// the child's purpose (CHILD_TYPE_RDB/AOF/LDB/MODULE, src/server.h).
const std::vector<EntryPoint>& redis_entry_points();

struct FoundEntryPoint {
  const EntryPoint* entry = nullptr;
  std::string symbol;  // the ELF symbol to attach to; empty when the binary does not give it
  std::string why;     // when empty symbol: one sentence on what was found instead
};

struct BinaryEntryPoints {
  std::string binary;
  bool readable = false;
  std::vector<FoundEntryPoint> found;  // in table order
  uint32_t anchors() const;            // REDIS_ANCHOR_* bits of those found
};

// Reads the ELF symbol tables (.symtab and .dynsym) of `elf_path`.
BinaryEntryPoints find_entry_points(const std::string& elf_path);
// The same decision from a binary's function symbols (name -> address), for tests.
BinaryEntryPoints entry_points_from_symbols(const std::string& binary, const std::map<std::string, uint64_t>& symbols);

struct LabelCoverage {
  std::string reason;  // a reason name (correlate::reason_name)
  bool by_uprobe = false;
  std::string why;     // by INFO: which entry point is missing
};

// Which reasons the uprobes name exactly with the entry points in `anchors`; the others are left to
// INFO polling. Mirrors reason_from_ctx in bpf/fork.bpf.c.
std::vector<LabelCoverage> label_coverage(uint32_t anchors);

// One line for `thptrace probe` and the capture: what the binary gave, what is lost and why.
std::string describe(const BinaryEntryPoints& b);

}  // namespace thptrace::tracer
