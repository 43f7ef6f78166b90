// SPDX-License-Identifier: Apache-2.0
#include "tracer/links.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <optional>
#include <system_error>
#include <thread>

#include "common/error.h"
#include "kernel/abi.h"
#include "proc/foreign_file.h"
#include "proc/maps.h"
#include "proc/proc.h"
#include "thptrace_bpf.skel.h"
#include "tracer/entry_points.h"
#include "tracer/loader.h"

namespace thptrace::tracer {
namespace {

// Releasing a uprobe link waits for the kernel's grace periods (uprobe_unregister), so releasing many
// one after another makes a daemon slow to stop (docs/development/measurements.md has the figures).
// From several threads at once the waits overlap. The calling thread takes part, so a thread that
// cannot be started costs only speed.
template <class Link>
void release_together(std::vector<Link> links) {
  constexpr size_t kThreads = 16;
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t k = next++; k < links.size(); k = next++) links[k].reset();
  };
  std::vector<std::thread> helpers;
  try {
    while (helpers.size() + 1 < std::min(kThreads, links.size())) helpers.emplace_back(work);
  } catch (const std::system_error&) {
    // fewer helpers
  }
  work();
  for (auto& t : helpers) t.join();
}

}  // namespace

void Links::LinkDeleter::operator()(bpf_link* l) const { bpf_link__destroy(l); }

Links::~Links() {
  std::vector<LinkPtr> uprobes;
  for (auto& [pid, links] : libc_fork_) std::ranges::move(links, std::back_inserter(uprobes));
  for (auto& [binary, shared] : redis_uprobes_) std::ranges::move(shared.links, std::back_inserter(uprobes));
  libc_fork_.clear();
  redis_uprobes_.clear();
  release_together(std::move(uprobes));
  huge_alloc_.reset();
  clone_links_.clear();
  kernel_.clear();
}

void Links::attach_kernel_programs() {
  bpf_object* obj = skel_->obj;
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, obj) {
    if (!bpf_program__autoload(prog) || prog == huge_alloc_prog_ ||
        std::ranges::count(clone_syscall_programs(skel_), prog) || std::ranges::count(sched_programs(skel_), prog))
      continue;
    const char* sec = bpf_program__section_name(prog);
    if (std::strncmp(sec, "uprobe", 6) == 0 || std::strncmp(sec, "uretprobe", 9) == 0) continue;
    bpf_link* link = bpf_program__attach(prog);
    if (!link) {
      const int e = errno;
      throw FatalError(kExitRuntime, std::string("cannot attach BPF program ") + bpf_program__name(prog) + " (" + sec +
                                         "): " + std::strerror(e));
    }
    kernel_.emplace_back(link);
  }
}

bool Links::attach_loaded(std::span<bpf_program* const> programs, std::vector<LinkPtr>& into, std::string* why) {
  std::vector<LinkPtr> links;
  for (bpf_program* prog : programs) {
    if (!bpf_program__autoload(prog)) continue;
    bpf_link* link = bpf_program__attach(prog);
    if (!link) {
      if (why) *why = std::string("cannot attach ") + bpf_program__name(prog) + ": " + std::strerror(errno);
      return false;
    }
    links.emplace_back(link);
  }
  into = std::move(links);
  return true;
}

bool Links::time_clone_syscalls(pid_t pid, std::string* why) {
  if (clone_links_.empty() && !attach_loaded(clone_syscall_programs(skel_), clone_links_, why)) return false;
  clone_timed_.insert(pid);
  return true;
}

bool Links::attach_huge_alloc_counting(std::string* why) {
  if (huge_alloc_) return true;
  huge_alloc_.reset(bpf_program__attach(huge_alloc_prog_));
  if (!huge_alloc_ && why)
    *why = std::string("cannot attach ") + bpf_program__name(huge_alloc_prog_) + ": " + std::strerror(errno);
  return huge_alloc_ != nullptr;
}

Mode Links::huge_alloc_mode() const {
  if (!huge_alloc_) return Mode::unavailable;
  return huge_alloc_prog_ == skel_->progs.page_alloc_btf ? Mode::tp_btf : Mode::raw_tp;
}

bool Links::attach_redis(pid_t pid, std::string* why) {
  if (redis_mode_ != Mode::uprobe) {
    if (why) *why = "the redis family is in mode " + std::string(mode_name(redis_mode_));
    return false;
  }
  // Through the process's own view of its binary, so it works across mount namespaces.
  const std::string binary = "/proc/" + std::to_string(pid) + "/exe";
  struct stat st {};
  if (::stat(binary.c_str(), &st) != 0) {
    if (why) *why = "cannot read " + binary + ": " + std::strerror(errno);
    return false;
  }
  const BinaryKey key{st.st_dev, st.st_ino};
  if (const auto known = redis_binary_of_.find(pid); known == redis_binary_of_.end() || known->second != key)
    detach_redis(pid);  // another binary (exec) or none
  auto it = redis_uprobes_.find(key);
  if (it == redis_uprobes_.end()) it = redis_uprobes_.emplace(key, attach_redis_binary(binary)).first;
  SharedUprobes& shared = it->second;
  if (why) *why = shared.why;
  if (!shared.anchors) {
    if (shared.users.empty()) redis_uprobes_.erase(it);
    return false;
  }
  const __u32 k = static_cast<__u32>(pid);
  if (bpf_map__update_elem(skel_->maps.redis_anchors, &k, sizeof k, &shared.anchors, sizeof shared.anchors, BPF_ANY)) {
    if (why)
      *why = std::string("cannot record the entry points of pid ") + std::to_string(pid) + ": " + std::strerror(errno);
    if (shared.users.empty()) redis_uprobes_.erase(it);
    return false;
  }
  shared.users.insert(pid);
  redis_binary_of_[pid] = key;
  return true;
}

Links::SharedUprobes Links::attach_redis_binary(const std::string& binary) {
  auto entry_points = find_entry_points(binary);
  auto& p = skel_->progs;
  const std::map<uint32_t, std::pair<bpf_program*, bpf_program*>> programs = {
      {REDIS_ANCHOR_FORK, {p.redis_fork_enter, p.redis_fork_exit}},
      {REDIS_ANCHOR_REPLICATION, {p.repl_bgsave_enter, p.repl_bgsave_exit}},
      {REDIS_ANCHOR_RDB_SOCKETS, {p.rdb_sockets_enter, p.rdb_sockets_exit}},
      {REDIS_ANCHOR_RDB_BACKGROUND, {p.rdb_bgsave_enter, p.rdb_bgsave_exit}},
      {REDIS_ANCHOR_AOF_REWRITE, {p.aof_rewrite_enter, p.aof_rewrite_exit}},
  };
  SharedUprobes shared;
  // Each entry point on its own: one that does not attach costs only the labels that need it.
  for (auto& found : entry_points.found) {
    if (found.symbol.empty()) continue;
    const auto& [enter, exit] = programs.at(found.entry->anchor);
    LinkPtr pair[2];
    for (const bool ret : {false, true}) {
      LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = ret, .func_name = found.symbol.c_str());
      // Every process running the binary (-1): the programs act only for watched ones.
      pair[ret].reset(bpf_program__attach_uprobe_opts(ret ? exit : enter, -1, binary.c_str(), 0, &opts));
      if (!pair[ret]) {
        found.why = "cannot attach a uprobe on " + found.symbol + ": " + std::strerror(errno);
        found.symbol.clear();
        break;
      }
    }
    if (found.symbol.empty()) continue;
    for (auto& l : pair) shared.links.push_back(std::move(l));
  }
  shared.anchors = entry_points.anchors();
  shared.why = describe(entry_points);
  return shared;
}

void Links::detach_redis(pid_t pid) {
  const auto node = redis_binary_of_.extract(pid);
  if (!node) return;
  const __u32 key = static_cast<__u32>(pid);
  bpf_map__delete_elem(skel_->maps.redis_anchors, &key, sizeof key, 0);
  const auto it = redis_uprobes_.find(node.mapped());
  if (it == redis_uprobes_.end()) return;
  it->second.users.erase(pid);
  if (it->second.users.empty()) {
    release_together(std::move(it->second.links));
    redis_uprobes_.erase(it);
  }
}

void Links::detach_uprobes(pid_t pid) {
  if (auto node = libc_fork_.extract(pid)) release_together(std::move(node.mapped()));
  detach_redis(pid);
}

bool Links::attach_libc_fork(pid_t pid, std::string* why) {
  if (attach_libc_fork_pair(pid, why)) return true;
  if (std::string more; !time_clone_syscalls(pid, &more) && why) *why += "; " + more;
  return false;
}

bool Links::attach_libc_fork_pair(pid_t pid, std::string* why) {
  // The libc the process maps, opened as the process sees it (the mapped file itself, or a walk
  // confined to its root: proc/foreign_file.h) and named to libbpf and the kernel by our own fd link.
  const auto maps = proc::read_file("/proc/" + std::to_string(pid) + "/maps", 4 << 20);
  std::optional<proc::Mapping> mapping;
  for (auto& m : maps ? proc::parse_maps(*maps) : std::vector<proc::Mapping>{})
    if (m.path.starts_with('/') && m.path.ends_with("/libc.so.6")) {
      mapping = std::move(m);
      break;
    }
  if (!mapping) {
    if (why) *why = "the process maps no libc.so.6";
    return false;
  }
  const std::string& libc = mapping->path;
  const proc::ForeignFile file = proc::open_process_file(pid, libc, proc::kMaxElfBytes, mapping->range());
  if (!file.fd) {
    if (why) *why = "cannot open " + libc + " of the process: " + file.error;
    return false;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(file.fd.get());
  std::vector<LinkPtr> links;
  for (const bool ret : {false, true}) {
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = ret, .func_name = "fork");
    bpf_link* link = bpf_program__attach_uprobe_opts(ret ? skel_->progs.libc_fork_exit : skel_->progs.libc_fork_enter,
                                                     pid, path.c_str(), 0, &opts);
    if (!link) {
      if (why) *why = "cannot attach a uprobe on fork in " + libc + ": " + std::strerror(errno);
      return false;
    }
    links.emplace_back(link);
  }
  auto& mine = libc_fork_[pid];
  for (auto& l : links) mine.push_back(std::move(l));
  return true;
}

bool Links::attach_sched(std::string* why) {
  return !sched_links_.empty() || attach_loaded(sched_programs(skel_), sched_links_, why);
}

void Links::stop_clone_timing(pid_t pid) {
  if (clone_timed_.erase(pid) && clone_timed_.empty()) clone_links_.clear();
}

size_t Links::count() const {
  size_t n = kernel_.size() + clone_links_.size() + sched_links_.size() + (huge_alloc_ ? 1 : 0);
  for (const auto& [pid, links] : libc_fork_) n += links.size();
  for (const auto& [binary, shared] : redis_uprobes_) n += shared.links.size();
  return n;
}

}  // namespace thptrace::tracer
