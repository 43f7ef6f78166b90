// SPDX-License-Identifier: Apache-2.0
#include "correlate/copies.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common/units.h"

namespace thptrace::correlate {

namespace {

// Groups by count, most first, ties by name (a stable report).
std::vector<CopyGroup> ranked(const std::map<std::string, uint64_t>& counts, uint64_t total, uint32_t n, size_t keep) {
  std::vector<CopyGroup> out;
  out.reserve(counts.size());
  for (const auto& [name, k] : counts)
    out.push_back({name, "", k, total ? static_cast<double>(k) / static_cast<double>(total) : 0.0,
                   static_cast<uint64_t>(n) * k, estimate_error(n, k)});
  std::stable_sort(out.begin(), out.end(),
                   [](const CopyGroup& a, const CopyGroup& b) { return a.samples > b.samples; });
  if (out.size() > keep) out.resize(keep);
  return out;
}

std::string path_of(const CopySample& s, bool leaf_only) {
  if (s.frames.empty()) return "?";
  std::string path = s.frames.front();
  size_t shown = 1;
  for (size_t i = 1; i < s.frames.size() && shown < kPathFrames && !leaf_only; ++i) {
    if (s.frames[i] == s.frames[i - 1]) continue;  // recursion adds nothing to a short path
    path += " ← " + s.frames[i];
    ++shown;
  }
  return path;
}

}  // namespace

std::string command_of(const CopySample& s) {
  const auto& f = s.frames;
  const auto call = std::find(f.begin(), f.end(), "call");
  if (call != f.end() && call != f.begin()) {
    std::string fn = *(call - 1);
    constexpr std::string_view kSuffix = "Command";
    // call()'s own work around the command (its latency histogram, its stats) is not the command's.
    if (fn.size() <= kSuffix.size() || !fn.ends_with(kSuffix)) return "call() bookkeeping";
    fn.resize(fn.size() - kSuffix.size());
    std::transform(fn.begin(), fn.end(), fn.begin(), [](unsigned char c) { return std::toupper(c); });
    return fn;
  }
  static const std::vector<std::pair<std::set<std::string>, const char*>> loop_work = {
      {{"activeExpireCycle", "expireSlaveKeys", "expireReplicaKeys"}, "expire cycle"},
      {{"processMultibulkBuffer", "processInlineBuffer", "processInputBuffer", "readQueryFromClient"},
       "query-buffer reads"},
      {{"writeToClient", "_writeToClient", "sendReplyToClient", "handleClientsWithPendingWrites", "addReply",
        "_addReplyToBufferOrList"},
       "replies"},
      {{"serverCron", "databasesCron", "clientsCron", "incrementallyRehash"}, "cron"},
      {{"beforeSleep", "afterSleep"}, "before sleep"},
  };
  for (const auto& fn : f)
    for (const auto& [names, what] : loop_work)
      if (names.contains(fn)) return what;
  return s.whole ? "other" : "unattributed";
}

bool looks_like_redis(const std::vector<const CopySample*>& samples) {
  return std::any_of(samples.begin(), samples.end(), [](const CopySample* s) {
    return std::any_of(s->frames.begin(), s->frames.end(),
                       [](const std::string& f) { return f == "aeProcessEvents" || f == "call" || f == "aeMain"; });
  });
}

bool is_stack_root(const std::string& f) {
  static const std::set<std::string> roots = {
      "main",   "__libc_start_call_main", "__libc_start_main", "_start", "start_thread", "clone3", "__clone3", "clone",
      "__clone"};
  return roots.contains(f);
}

uint64_t estimate_error(uint32_t sample_every, uint64_t k) {
  return static_cast<uint64_t>(std::llround(1.96 * sample_every * std::sqrt(static_cast<double>(k))));
}

CopyAttribution attribute_copies(const std::vector<const CopySample*>& samples, uint32_t sample_every, uint64_t copies,
                                 uint64_t rss_kb) {
  CopyAttribution a;
  a.sample_every = sample_every;
  a.samples = samples.size();
  a.estimated = static_cast<uint64_t>(sample_every) * a.samples;
  a.estimated_error = estimate_error(sample_every, a.samples);
  if (rss_kb) a.copy_ratio = static_cast<double>(copies * kPageBytes) / (static_cast<double>(rss_kb) * 1024.0);
  // Most stacks stopping short: the binary whose faulting functions they start in has no frame
  // pointers, and a path would be the leaf and junk; then paths are the faulting function alone.
  size_t partial = 0;
  std::map<std::string, uint64_t> partial_modules;
  for (const auto* s : samples)
    if (!s->whole) {
      ++partial;
      ++partial_modules[s->leaf_module.empty() ? "?" : s->leaf_module];
    }
  const bool leaf_only = !samples.empty() && partial * 2 > samples.size();
  if (leaf_only) {
    const auto most = std::max_element(partial_modules.begin(), partial_modules.end(),
                                       [](const auto& x, const auto& y) { return x.second < y.second; });
    a.stacks_partial = most->first + " has no frame pointers";
  }
  std::map<std::string, uint64_t> paths, functions, mappings, commands;
  std::map<std::string, std::string> leaf_of;
  const bool redis = looks_like_redis(samples);
  for (const auto* s : samples) {
    if (redis) ++commands[command_of(*s)];
    if (s->dwarf) ++a.dwarf_samples;
    const std::string path = path_of(*s, leaf_only);
    ++paths[path];
    leaf_of[path] = s->frames.empty() ? "?" : s->frames.front();
    ++mappings[s->mapping.empty() ? "unmapped" : s->mapping];
    // A function counts once per sample, however often it recurs in the stack.
    std::set<std::string> seen;
    for (size_t i = 0; i < s->frames.size() && (!leaf_only || i == 0); ++i)
      if (seen.insert(s->frames[i]).second) ++functions[s->frames[i]];
  }
  a.paths = ranked(paths, a.samples, sample_every, kTopPaths);
  for (auto& p : a.paths) p.leaf = leaf_of[p.name];
  a.functions = ranked(functions, a.samples, sample_every, kTopFunctions);
  a.mappings = ranked(mappings, a.samples, sample_every, SIZE_MAX);
  a.commands = ranked(commands, a.samples, sample_every, SIZE_MAX);
  return a;
}

}  // namespace thptrace::correlate
