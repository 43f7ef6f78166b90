// SPDX-License-Identifier: Apache-2.0
#include "tracer/entry_points.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <map>
#include <set>

#include "kernel/abi.h"

namespace thptrace::tracer {
namespace {

// GCC's names for a function's copies (gcc/ipa-*.cc): `.lto_priv.N` is the function itself made
// local by LTO (same code, same ABI); `.constprop.N` and `.isra.N` are whole clones whose arguments
// were folded or rewritten; `.part.N` and `.cold` hold only a piece of a function.
enum class Copy { exact, same_abi, clone, piece };

Copy kind_of_suffix(const std::string& suffix) {
  if (suffix.empty()) return Copy::exact;
  if (suffix.rfind(".lto_priv.", 0) == 0) return Copy::same_abi;
  if (suffix.find(".part.") != std::string::npos || suffix.find(".cold") != std::string::npos) return Copy::piece;
  if (suffix.rfind(".constprop.", 0) == 0 || suffix.rfind(".isra.", 0) == 0) return Copy::clone;
  return Copy::piece;
}

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// Every defined function symbol of the ELF file, by name (addresses kept to see aliases).
bool function_symbols(const std::string& path, std::map<std::string, uint64_t>& out) {
  elf_version(EV_CURRENT);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  FdCloser closer{fd};
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  if (!elf) return false;
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr shdr;
    if (!gelf_getshdr(scn, &shdr) || (shdr.sh_type != SHT_SYMTAB && shdr.sh_type != SHT_DYNSYM)) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data || shdr.sh_entsize == 0) continue;
    const size_t n = shdr.sh_size / shdr.sh_entsize;
    for (size_t i = 0; i < n; ++i) {
      GElf_Sym sym;
      if (!gelf_getsym(data, static_cast<int>(i), &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_value == 0)
        continue;
      if (const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name)) out.emplace(name, sym.st_value);
    }
  }
  elf_end(elf);
  return true;
}

FoundEntryPoint resolve(const EntryPoint& ep, const std::map<std::string, uint64_t>& syms) {
  FoundEntryPoint f{&ep, {}, {}};
  std::vector<std::string> unusable;
  for (const auto& name : ep.names) {
    if (syms.contains(name)) {
      f.symbol = name;
      return f;
    }
    // Copies of `name`, at distinct addresses (an LTO-local copy may also keep an alias).
    std::set<uint64_t> addrs;
    std::string best;
    for (auto it = syms.lower_bound(name + "."); it != syms.end() && it->first.rfind(name + ".", 0) == 0; ++it) {
      const Copy c = kind_of_suffix(it->first.substr(name.size()));
      if (c == Copy::same_abi || (c == Copy::clone && !ep.reads_argument)) {
        addrs.insert(it->second);
        best = it->first;
      } else {
        unusable.push_back(it->first);
      }
    }
    if (addrs.size() == 1) {
      f.symbol = best;
      return f;
    }
    if (addrs.size() > 1) unusable.push_back(fmt::format("{} copies of {}", addrs.size(), name));
  }
  const std::string names = ep.names.size() > 1 ? ep.names[0] + "/" + ep.names[1] : ep.names[0];
  if (unusable.empty())
    f.why = names + " is not in the binary (inlined into its callers, or another version)";
  else
    f.why = names + " survives only as " + unusable.front() +
            (ep.reads_argument ? ", whose arguments may differ" : ", not the whole function");
  return f;
}

}  // namespace

const std::vector<EntryPoint>& redis_entry_points() {
  static const std::vector<EntryPoint> table = {
      {REDIS_ANCHOR_FORK, {"redisFork", "serverFork"}, true, "the child's purpose: RDB, AOF rewrite, module, Lua debugger"},
      {REDIS_ANCHOR_REPLICATION, {"startBgsaveForReplication"}, true, "a full sync, and whether it uses an rdb channel"},
      {REDIS_ANCHOR_RDB_SOCKETS, {"rdbSaveToSlavesSockets", "rdbSaveToReplicasSockets"}, true, "a diskless full sync"},
      {REDIS_ANCHOR_RDB_BACKGROUND, {"rdbSaveBackground"}, false, "an RDB child (without the fork anchor)"},
      {REDIS_ANCHOR_AOF_REWRITE, {"rewriteAppendOnlyFileBackground"}, false, "an AOF rewrite (without the fork anchor)"},
  };
  return table;
}

uint32_t BinaryEntryPoints::anchors() const {
  uint32_t a = 0;
  for (const auto& f : found)
    if (!f.symbol.empty()) a |= f.entry->anchor;
  return a;
}

BinaryEntryPoints entry_points_from_symbols(const std::string& binary, const std::map<std::string, uint64_t>& symbols) {
  BinaryEntryPoints b;
  b.binary = binary;
  b.readable = true;
  for (const auto& ep : redis_entry_points()) b.found.push_back(resolve(ep, symbols));
  return b;
}

BinaryEntryPoints find_entry_points(const std::string& elf_path) {
  std::map<std::string, uint64_t> syms;
  if (function_symbols(elf_path, syms)) return entry_points_from_symbols(elf_path, syms);
  BinaryEntryPoints b;
  b.binary = elf_path;
  for (const auto& ep : redis_entry_points()) b.found.push_back({&ep, {}, "cannot read " + elf_path});
  return b;
}

std::vector<LabelCoverage> label_coverage(uint32_t a) {
  const bool fork = a & REDIS_ANCHOR_FORK, repl = a & REDIS_ANCHOR_REPLICATION, sockets = a & REDIS_ANCHOR_RDB_SOCKETS,
             rdb = a & REDIS_ANCHOR_RDB_BACKGROUND, aof = a & REDIS_ANCHOR_AOF_REWRITE;
  auto entry = [](bool ok, const char* missing) { return LabelCoverage{"", ok, ok ? "" : missing}; };
  std::vector<LabelCoverage> out;
  // An RDB child is a BGSAVE only when a full sync would have been seen.
  out.push_back(entry((fork || rdb) && repl, !repl ? "needs startBgsaveForReplication" : "needs redisFork/serverFork or rdbSaveBackground"));
  out.back().reason = "bgsave";
  out.push_back(entry(repl && (sockets || rdb), !repl ? "needs startBgsaveForReplication" : "needs rdbSaveToSlavesSockets or rdbSaveBackground"));
  out.back().reason = "full_sync_disk";
  out.push_back(entry(sockets, "needs rdbSaveToSlavesSockets/rdbSaveToReplicasSockets"));
  out.back().reason = "full_sync_diskless";
  out.push_back(entry(sockets || repl, "needs rdbSaveToSlavesSockets or startBgsaveForReplication"));
  out.back().reason = "full_sync_rdb_channel";
  out.push_back(entry(fork || aof, "needs redisFork/serverFork or rewriteAppendOnlyFileBackground"));
  out.back().reason = "aof_rewrite";
  out.push_back(entry(fork, "needs redisFork/serverFork"));
  out.back().reason = "module";
  return out;
}

std::string describe(const BinaryEntryPoints& b) {
  if (!b.readable) return "cannot read " + b.binary + ": every fork reason comes from INFO";
  std::string gave, lost;
  for (const auto& f : b.found) {
    if (!f.symbol.empty()) {
      gave += (gave.empty() ? "" : ", ") + f.symbol;
    } else {
      lost += fmt::format("{}{}", lost.empty() ? "" : "; ", f.why);
    }
  }
  std::string info;
  for (const auto& c : label_coverage(b.anchors()))
    if (!c.by_uprobe) info += (info.empty() ? "" : ", ") + c.reason + " (" + c.why + ")";
  std::string s = "entry points: " + (gave.empty() ? std::string("none") : gave);
  if (!lost.empty()) s += "; missing: " + lost;
  s += info.empty() ? "; every reason by uprobe" : "; by INFO instead: " + info;
  return s;
}

}  // namespace thptrace::tracer
