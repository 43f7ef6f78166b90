#pragma once
// The kernel side of thptrace: owns the BPF skeleton, its links and its ring buffer. Loads only the
// programs of the modes chosen by choose_modes(), watches target processes through the targets map,
// and hands discrete events to a callback. Every resource is released by the destructor.

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tracer/abi.h"
#include "tracer/probe.h"

struct thptrace_bpf;
struct bpf_link;
struct bpf_program;
struct ring_buffer;

namespace thptrace::tracer {

struct TracerOptions {
  size_t ringbuf_bytes = 256 * 1024;  // a power of two, ≥ one page
};

class Tracer {
 public:
  // Opens and loads the BPF object for `modes`, moving a family whose real programs the kernel refuses
  // down its chain (modes() then says what is loaded). Throws FatalError (exit 1) below the minimum
  // kernel, without privilege, or when the fork or COW family cannot load at all.
  Tracer(const ProbeReport& modes, const TracerOptions& options = {});
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Attaches every loaded kernel program but the huge-page allocation counter. Throws FatalError on
  // failure.
  void attach();
  // Counts order-9 allocations by watched processes (huge_allocs). Its hook, mm_page_alloc, runs on
  // every page allocation of the machine (a COW fault makes one), so callers attach it only when a
  // watched process can be given a huge page. Returns false with *why set when it cannot attach.
  bool attach_huge_alloc_counting(std::string* why);
  // The attach mode of that counter, or Mode::unavailable while it is not attached.
  Mode huge_alloc_mode() const;
  void watch(pid_t tgid);
  void unwatch(pid_t tgid);
  // Puts the Redis uprobes on the binary of `pid` (through /proc/PID/exe, so it works across mount
  // namespaces). Returns false with *why set when they cannot be attached.
  bool attach_redis(pid_t pid, std::string* why);
  // Detaches every uprobe (Redis and libc) of `pid`.
  void detach_uprobes(pid_t pid);
  // Times libc's fork() in `pid` with a uprobe pair on the libc it maps: the span Redis reports as
  // latest_fork_usec. Optional: without it fork duration is the clone syscall's.
  bool attach_libc_fork(pid_t pid, std::string* why);

  // Waits up to timeout_ms for events and passes each to on_event. Returns the number handled, or a
  // negative errno (EINTR when a signal arrived).
  int poll(int timeout_ms, const std::function<void(const thptrace_event&)>& on_event);

  std::optional<thptrace_target> target(pid_t tgid) const;
  // Whether a watched tgid's faults are counted on the fast path (it owns its hot line) rather than
  // in the hash maps (another watched tgid owns the line).
  bool owns_hot_line(pid_t tgid) const;
  // Episodes of `parent` still in the kernel map: children alive now, or whose exit record was lost.
  std::vector<thptrace_episode> episodes_of(pid_t parent) const;
  void forget_episode(pid_t child);
  // Ring-buffer records the kernel could not deliver since load.
  uint64_t dropped() const;
  const ProbeReport& modes() const { return modes_; }
  // Whether this process may read the maps now (false when the bpf() syscall refuses it: EPERM).
  bool maps_readable() const;
  size_t link_count() const;

 private:
  struct SkelDeleter {
    void operator()(::thptrace_bpf* s) const;
  };
  struct LinkDeleter {
    void operator()(bpf_link* l) const;
  };
  struct RingDeleter {
    void operator()(ring_buffer* r) const;
  };
  using LinkPtr = std::unique_ptr<bpf_link, LinkDeleter>;

  static int on_ring_record(void* ctx, void* data, size_t size);

  thptrace_hot* hot_line(pid_t tgid) const;
  int load(const char* only_family, size_t ringbuf_bytes);

  ProbeReport modes_;
  std::unique_ptr<::thptrace_bpf, SkelDeleter> skel_;
  thptrace_hot* hot_ = nullptr;            // the hot map, mmapped: THPTRACE_HOT_LINES lines
  std::map<pid_t, bool> watched_;          // watched tgids: true when it owns its hot line
  std::vector<LinkPtr> links_;
  LinkPtr huge_alloc_link_;
  bpf_program* huge_alloc_prog_ = nullptr;  // page_alloc_btf or page_alloc_raw, whichever is loaded
  std::map<pid_t, std::vector<LinkPtr>> uprobe_links_;  // Redis and libc uprobes, by process
  std::unique_ptr<ring_buffer, RingDeleter> ring_;
  const std::function<void(const thptrace_event&)>* on_event_ = nullptr;
};

}  // namespace thptrace::tracer
