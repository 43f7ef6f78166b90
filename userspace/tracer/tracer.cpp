// SPDX-License-Identifier: Apache-2.0
#include "tracer/tracer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "thptrace_bpf.skel.h"

namespace thptrace::tracer {
namespace {

CounterShape counter_shape(const TracerOptions& options) {
  const int ncpu = libbpf_num_possible_cpus();
  return {.regions = static_cast<uint32_t>(std::clamp(ncpu, 1, THPTRACE_MAX_CPUS)),
          .slots = std::max<uint32_t>(options.max_targets, 1)};
}

}  // namespace

void Tracer::RingDeleter::operator()(ring_buffer* r) const { ring_buffer__free(r); }

Tracer::Tracer(const AttachModes& requested, const TracerOptions& options)
    : shape_(counter_shape(options)),
      loaded_(load_object(requested, options, shape_)),
      counters_(loaded_.skel.get(), shape_),
      links_(loaded_.skel.get(), loaded_.modes.redis.mode, loaded_.huge_alloc_prog),
      sample_every_(options.sample_every) {
  ring_.reset(ring_buffer__new(bpf_map__fd(loaded_.skel->maps.events), &Tracer::on_ring_record, this, nullptr));
  if (!ring_) throw FatalError(kExitRuntime, std::string("cannot set up the ring buffer: ") + std::strerror(errno));
  if (sample_every_ &&
      ring_buffer__add(ring_.get(), bpf_map__fd(loaded_.skel->maps.samples), &Tracer::on_sample_record, this) != 0)
    throw FatalError(kExitRuntime, std::string("cannot set up the samples ring buffer: ") + std::strerror(errno));
}

Tracer::~Tracer() = default;

void Tracer::attach() { links_.attach_kernel_programs(); }

void Tracer::unwatch(pid_t tgid) {
  links_.stop_clone_timing(tgid);
  counters_.unwatch(tgid);
}

Followed Tracer::follow(pid_t pid, bool info_polling) {
  Followed f;
  if (!counters_.watch(pid, &f.why)) return f;
  f.watched = true;
  f.libc_fork = links_.attach_libc_fork(pid, &f.fork_timing);
  const FamilyChoice& redis = loaded_.modes.redis;
  if (redis.mode == Mode::uprobe) {
    std::string why;
    f.redis = links_.attach_redis(pid, &why) ? FamilyChoice{Mode::uprobe, why}
                                             // which entry points the binary gave, which labels are left to INFO
                                             : FamilyChoice{info_polling ? Mode::info_polling : Mode::unavailable, why};
  } else if (redis.mode == Mode::info_polling && !info_polling) {
    f.redis = {Mode::unavailable, "no --redis address to poll"};
  } else {
    f.redis = redis;
  }
  return f;
}

int Tracer::on_ring_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<Tracer*>(ctx);
  // A record without an episode (EV_DISK) is the event's head alone.
  if (size < THPTRACE_EVENT_HEAD_BYTES || !self->on_event_) return 0;
  thptrace_event e{};
  std::memcpy(&e, data, std::min(size, sizeof e));
  // A tracked fork (value2): the sched family from now until no tracked child lives.
  if (e.type == EV_FORK && e.value2 && self->loaded_.modes.sched.mode != Mode::unavailable &&
      self->sched_refused_.empty() && !self->links_.sched_attached()) {
    if (std::string why; !self->links_.attach_sched(&why)) {
      log::warn("{}: what held the CPU while the main thread waited is not counted", why);
      self->sched_refused_ = why;
    }
  }
  // No exception may cross libbpf's C frames.
  try {
    (*self->on_event_)(e);
  } catch (const std::exception& ex) {
    log::warn("dropping an event: {}", ex.what());
  }
  return 0;
}

int Tracer::on_sample_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<Tracer*>(ctx);
  if (size < sizeof(thptrace_copy_sample)) return 0;
  CopySampleRecord r;
  thptrace_copy_sample& s = r.sample;
  std::memcpy(&s, data, sizeof s);
  if (s.type != EV_COPY_SAMPLE && s.type != EV_COPY_SAMPLE_DWARF) return 0;
  s.frames = std::min<__u32>(s.frames, THPTRACE_STACK_DEPTH);
  try {
    if (s.type == EV_COPY_SAMPLE_DWARF && size >= sizeof(thptrace_copy_sample_dwarf)) {
      const auto* d = static_cast<const thptrace_copy_sample_dwarf*>(data);
      r.user.emplace();
      std::memcpy(r.user->regs.data(), d->regs, sizeof d->regs);
      const uint32_t n = std::min<uint32_t>(d->stack_bytes, THPTRACE_DWARF_STACK);
      r.user->stack.assign(d->stack, d->stack + n);
    }
    self->copy_samples_.push_back(std::move(r));
  } catch (const std::exception& ex) {  // no exception may cross libbpf's C frames
    log::warn("dropping a copy sample: {}", ex.what());
  }
  return 0;
}

int Tracer::poll(int timeout_ms, const std::function<void(const thptrace_event&)>& on_event) {
  on_event_ = &on_event;
  int n = ring_buffer__poll(ring_.get(), timeout_ms);
  // Copy samples wake no one until their ring is half full (sample_wakeup_bytes), so epoll does not
  // report that ring: read every ring, whatever woke us.
  if (sample_every_ && n >= 0) {
    const int more = ring_buffer__consume(ring_.get());
    n = more < 0 ? more : n + more;
  }
  on_event_ = nullptr;
  if (links_.sched_attached() && counters_.live_forks() == 0) links_.detach_sched();
  return n;
}

std::vector<ProgramStats> Tracer::program_stats() const {
  std::vector<ProgramStats> out;
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, loaded_.skel->obj) {
    const int fd = bpf_program__fd(prog);
    if (fd < 0) continue;  // not loaded: a twin of another mode
    bpf_prog_info info{};
    __u32 len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len)) continue;
    out.push_back({bpf_program__name(prog), info.id, info.run_cnt, info.run_time_ns});
  }
  return out;
}

}  // namespace thptrace::tracer
