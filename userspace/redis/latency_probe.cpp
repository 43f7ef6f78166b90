// SPDX-License-Identifier: Apache-2.0
#include "redis/latency_probe.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <future>
#include <stdexcept>
#include <utility>

#include "common/log.h"
#include "proc/sampler.h"
#include "redis/backoff.h"

namespace thptrace::redis {
namespace {

// The first multiple of period at or after t: probes of the same rate share due times, so one
// wake-up of the loop sends all their requests.
uint64_t on_grid(uint64_t t, uint64_t period) { return (t + period - 1) / period * period; }

void wake_fd(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(fd, &one, sizeof one);
}

uint64_t period_of(uint32_t hz) { return 1'000'000'000ULL / std::max<uint32_t>(hz, 1); }

double nearest_rank_us(const std::vector<uint64_t>& sorted_ns, double p) {
  const auto n = sorted_ns.size();
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(n)));
  return static_cast<double>(sorted_ns[std::clamp<size_t>(rank, 1, n) - 1]) / 1e3;
}

}  // namespace

std::optional<ClientLatency> client_latency(const std::vector<ProbeSample>& samples, uint64_t from_ns, uint64_t to_ns,
                                            uint64_t client_timeout_us) {
  std::vector<uint64_t> ns;
  ClientLatency out;
  for (const auto& s : samples) {
    if (s.done_ns() < from_ns || s.done_ns() >= to_ns) continue;
    ns.push_back(s.latency_ns);
    if (s.failed || s.latency_ns > client_timeout_us * 1000) ++out.over_timeout;
  }
  if (ns.empty()) return std::nullopt;
  std::sort(ns.begin(), ns.end());
  out.samples = ns.size();
  out.p50_us = nearest_rank_us(ns, 0.50);
  out.p99_us = nearest_rank_us(ns, 0.99);
  out.p999_us = nearest_rank_us(ns, 0.999);
  out.max_us = static_cast<double>(ns.back()) / 1e3;
  return out;
}

namespace {
size_t bucket_of(uint64_t ns) {
  return ns <= 1 ? 0 : static_cast<size_t>(std::log2(static_cast<double>(ns)) * LatencyTotals::kBucketsPerOctave);
}
double bucket_top_ns(size_t b) { return std::exp2(static_cast<double>(b + 1) / LatencyTotals::kBucketsPerOctave); }
}  // namespace

void LatencyTotals::add(const ProbeSample& s) {
  const size_t b = bucket_of(s.latency_ns);
  if (b >= buckets_.size()) buckets_.resize(b + 1);
  ++buckets_[b];
  ++totals_.samples;
  if (s.failed || s.latency_ns > client_timeout_us_ * 1000) ++totals_.over_timeout;
  max_ns_ = std::max(max_ns_, s.latency_ns);
}

std::optional<ClientLatency> LatencyTotals::figures() const {
  if (!totals_.samples) return std::nullopt;
  ClientLatency out = totals_;
  const auto at = [&](double p) {
    const auto rank = std::clamp<uint64_t>(static_cast<uint64_t>(std::ceil(p * static_cast<double>(totals_.samples))),
                                           1, totals_.samples);
    uint64_t seen = 0;
    for (size_t b = 0; b < buckets_.size(); ++b)
      if ((seen += buckets_[b]) >= rank) return std::min(bucket_top_ns(b), static_cast<double>(max_ns_)) / 1e3;
    return static_cast<double>(max_ns_) / 1e3;
  };
  out.p50_us = at(0.50);
  out.p99_us = at(0.99);
  out.p999_us = at(0.999);
  out.max_us = static_cast<double>(max_ns_) / 1e3;
  return out;
}

// What a probe's owner and the loop share.
struct ProbeState {
  explicit ProbeState(LatencyProbe::Options o) : options(std::move(o)) {}
  const LatencyProbe::Options options;  // its connect credentials are the loop's, from new_user/new_password
  std::mutex mu;
  std::vector<ProbeSample> samples;    // under mu
  std::string new_user, new_password;  // under mu, with reconnect
  bool reconnect = false;              // under mu
  bool busy = false;                   // under mu
  uint64_t fork_ns = 0;                // under mu: a fork_began() the loop has not seen yet
  bool stopped = false;                // under mu: nothing more is recorded
  std::atomic<bool> cancel{false};     // ends a connect in flight (connect_first's stop)
  std::atomic<uint64_t> missed{0}, dropped{0};

  void record(const ProbeSample& s) {
    std::lock_guard lock(mu);
    if (stopped) return;
    if (samples.size() >= LatencyProbe::kMaxSamples) {
      ++dropped;
      return;
    }
    samples.push_back(s);
  }
};

// The loop thread's side of one probe.
struct ProbeLoop::Slot {
  std::shared_ptr<ProbeState> state;
  ConnectOptions connect;
  uint64_t busy_period = 0, idle_period = 0, max_behind = 0, timeout = 0;
  bool busy = false;
  std::unique_ptr<Client> client;
  // A connect in flight: its thread sets the result, then wakes the loop (in that order, or the
  // loop could wake to a result not there yet and wait for a wake-up that has passed).
  std::future<std::unique_ptr<Client>> connecting;
  std::thread connector;
  Backoff backoff;
  uint64_t retry_ns = 0;      // no connect before
  uint64_t due = 0;           // the next request's due time; 0: the next one on the grid
  uint64_t out_due = 0;       // the request out: when it was due (0: none out)
  uint64_t out_deadline = 0;  // when the request out fails
  uint64_t fork_ns = 0;       // a fork's start that no request has waited through yet
  // The last requests answered, (due, done): one that was due before a fork and answered after
  // its start already waited through it.
  std::array<std::pair<uint64_t, uint64_t>, 4> recent{};
  size_t recent_next = 0;

  Slot() = default;
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  ~Slot() {
    if (connector.joinable()) connector.join();  // cancelled first: it ends at its next route
  }
  uint64_t period() const { return busy ? busy_period : idle_period; }
  bool waited_through(uint64_t fork) const {
    return std::any_of(recent.begin(), recent.end(),
                       [fork](const auto& r) { return r.first && r.first <= fork && r.second >= fork; });
  }
};

LatencyProbe::LatencyProbe(Options options, std::shared_ptr<ProbeLoop> loop)
    : state_(std::make_shared<ProbeState>(std::move(options))),
      loop_(loop ? std::move(loop) : std::make_shared<ProbeLoop>()) {
  loop_->add(state_);
}

LatencyProbe::~LatencyProbe() { stop(); }

std::vector<ProbeSample> LatencyProbe::stop() {
  std::vector<ProbeSample> out;
  {
    std::lock_guard lock(state_->mu);
    if (!state_->stopped) loop_->remove(state_.get());
    state_->stopped = true;
    state_->cancel = true;
    out = std::exchange(state_->samples, {});
  }
  return out;
}

std::vector<ProbeSample> LatencyProbe::take() {
  std::lock_guard lock(state_->mu);
  return std::exchange(state_->samples, {});
}

void LatencyProbe::set_credentials(std::string user, std::string password) {
  {
    std::lock_guard lock(state_->mu);
    state_->new_user = std::move(user);
    state_->new_password = std::move(password);
    state_->reconnect = true;
  }
  loop_->wake();
}

void LatencyProbe::set_busy(bool busy) {
  {
    std::lock_guard lock(state_->mu);
    if (state_->busy == busy) return;
    state_->busy = busy;
  }
  loop_->wake();
}

void LatencyProbe::fork_began(uint64_t fork_ns) {
  if (!fork_ns) return;
  {
    std::lock_guard lock(state_->mu);
    state_->fork_ns = fork_ns;
  }
  loop_->wake();
}

uint64_t LatencyProbe::missed() const { return state_->missed; }
uint64_t LatencyProbe::dropped() const { return state_->dropped; }

ProbeLoop::ProbeLoop()
    : epoll_(::epoll_create1(EPOLL_CLOEXEC)),
      wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      timer_fd_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)),
      // Shared with the connects in flight, which may end after the loop.
      wake_owner_(new int(wake_fd_), [](int* fd) {
        if (*fd >= 0) ::close(*fd);
        delete fd;
      }) {
  if (epoll_ < 0 || wake_fd_ < 0 || timer_fd_ < 0)
    throw std::runtime_error(std::string("latency probe: ") + std::strerror(errno));
  for (const int fd : {wake_fd_, timer_fd_}) {
    epoll_event ev{.events = EPOLLIN, .data = {.ptr = nullptr}};
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0)
      throw std::runtime_error(std::string("latency probe: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] { run(); });
}

ProbeLoop::~ProbeLoop() {
  stop_ = true;
  wake();
  if (thread_.joinable()) thread_.join();
  for (auto& s : slots_) s->state->cancel = true;
  slots_.clear();  // waits for the connects in flight, which stop at their next route
  for (const int fd : {epoll_, timer_fd_})
    if (fd >= 0) ::close(fd);
}

void ProbeLoop::add(std::shared_ptr<ProbeState> state) {
  {
    std::lock_guard lock(mu_);
    added_.push_back(std::move(state));
  }
  wake();
}

void ProbeLoop::remove(const ProbeState* state) {
  {
    std::lock_guard lock(mu_);
    removed_.push_back(state);
  }
  wake();
}

void ProbeLoop::wake() { wake_fd(wake_fd_); }

void ProbeLoop::take_changes() {
  std::vector<std::shared_ptr<ProbeState>> added;
  std::vector<const ProbeState*> removed;
  {
    std::lock_guard lock(mu_);
    added.swap(added_);
    removed.swap(removed_);
  }
  for (auto& state : added) {
    auto s = std::make_unique<Slot>();
    const auto& o = state->options;
    s->connect = o.connect;
    s->busy_period = period_of(o.hz);
    s->idle_period = period_of(o.idle_hz ? o.idle_hz : o.hz);
    s->max_behind = static_cast<uint64_t>(std::chrono::nanoseconds(o.max_catch_up).count());
    s->timeout = static_cast<uint64_t>(std::chrono::nanoseconds(o.connect.timeout).count());
    s->state = std::move(state);
    slots_.push_back(std::move(s));
  }
  for (const ProbeState* gone : removed) {
    std::erase_if(slots_, [&](const auto& s) {
      if (s->state.get() != gone) return false;
      if (s->client) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, s->client->fd(), nullptr);
      // A connect in flight was cancelled by stop(); it is joined on a thread of its own, so the
      // loop does not wait for it.
      if (s->connector.joinable()) std::thread([t = std::move(s->connector)]() mutable { t.join(); }).detach();
      return true;
    });
  }
}

void ProbeLoop::run() {
  std::array<epoll_event, 64> events{};
  while (!stop_) {
    take_changes();
    uint64_t next = UINT64_MAX;
    const uint64_t now = proc::monotonic_ns();
    for (auto& s : slots_) next = std::min(next, step(*s, now));
    int timeout_ms = -1;
    if (next <= proc::monotonic_ns()) {
      timeout_ms = 0;
    } else if (next != UINT64_MAX) {
      itimerspec at{};
      at.it_value = {static_cast<time_t>(next / 1'000'000'000), static_cast<long>(next % 1'000'000'000)};
      ::timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &at, nullptr);
    }
    const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (auto* s = static_cast<Slot*>(events[static_cast<size_t>(i)].data.ptr)) {
        on_readable(*s);
        continue;
      }
      uint64_t drained = 0;  // the eventfd or the timer: only what they woke for matters
      [[maybe_unused]] auto r = ::read(wake_fd_, &drained, sizeof drained);
      r = ::read(timer_fd_, &drained, sizeof drained);
    }
  }
}

uint64_t ProbeLoop::step(Slot& s, uint64_t now) {
  ProbeState& st = *s.state;
  {
    std::lock_guard lock(st.mu);
    if (std::exchange(st.reconnect, false)) {
      s.connect.user = std::move(st.new_user);
      s.connect.password = std::move(st.new_password);
      if (s.client) drop_connection(s, 0);
    }
    if (st.busy != s.busy) {
      s.busy = st.busy;
      s.due = 0;  // on the new rate's grid from now
    }
    if (const uint64_t f = std::exchange(st.fork_ns, 0); f && !s.waited_through(f)) s.fork_ns = f;
  }
  if (s.connecting.valid()) {
    if (s.connecting.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return UINT64_MAX;
    s.client = s.connecting.get();
    s.connector.join();  // done but for its wake-up
    if (!s.client) {
      const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(s.backoff.failed(Backoff::Clock::now()));
      s.retry_ns = now + static_cast<uint64_t>(wait.count());
      return s.retry_ns;
    }
    epoll_event ev{.events = EPOLLIN, .data = {.ptr = &s}};
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, s.client->fd(), &ev) != 0) {
      s.client.reset();
      return now + s.idle_period;
    }
    s.due = 0;  // timed from here on: the due times of the connect itself were not a client's requests
  }
  if (!s.client) {
    if (now < s.retry_ns) return s.retry_ns;
    std::promise<std::unique_ptr<Client>> result;
    s.connecting = result.get_future();
    s.connector =
        std::thread([result = std::move(result), wake = wake_owner_, state = s.state, connect = s.connect]() mutable {
          std::string error;
          auto c =
              connect_first(state->options.routes, connect, state->options.netns_pid, state->cancel, nullptr, &error);
          if (!c) log::debug("latency probe: {}", error);
          result.set_value(std::move(c));
          wake_fd(*wake);
        });
    return UINT64_MAX;
  }
  if (s.out_due) {
    if (now < s.out_deadline) return s.out_deadline;
    // No reply in time: a failure timed to now, and the connection made again after the backoff, so
    // a server that accepts and never answers is not asked in a loop.
    drop_connection(s, now);
    return s.retry_ns;
  }
  if (s.fork_ns) {
    if (now > s.fork_ns + s.max_behind) {
      s.fork_ns = 0;
    } else {
      send(s, std::exchange(s.fork_ns, 0), now);
      return s.out_deadline;
    }
  }
  const uint64_t period = s.period();
  if (!s.due) s.due = on_grid(now, period);
  // Far behind (an outage, a stall of this thread): those due times are missed, not timed.
  if (now > s.due + s.max_behind) {
    const uint64_t skipped = (now - s.due) / period;
    st.missed += skipped;
    s.due += skipped * period;
  }
  if (now < s.due) return s.due;
  send(s, s.due, now);
  s.due += period;
  return s.out_deadline;
}

void ProbeLoop::send(Slot& s, uint64_t due, uint64_t now) {
  s.out_due = due;
  s.out_deadline = now + s.timeout;
  if (!s.client->send({"PING"})) {
    finish(s, proc::monotonic_ns(), true);
    drop_connection(s, now);
  }
}

void ProbeLoop::on_readable(Slot& s) {
  if (!s.client) return;
  const auto progress = s.client->read_reply();
  if (progress == Client::Progress::waiting) return;
  const uint64_t done = proc::monotonic_ns();
  if (progress == Client::Progress::failed) {
    drop_connection(s, done);  // the request out, if any, failed at done
    return;
  }
  if (!s.out_due) {  // bytes no request asked for: not a Redis we can time
    s.client->break_off("Redis sent a reply to no request");
    drop_connection(s, done);
    return;
  }
  finish(s, done, false);
  s.backoff.succeeded();
}

void ProbeLoop::finish(Slot& s, uint64_t done, bool failed) {
  const uint64_t due = std::exchange(s.out_due, 0);
  if (!due) return;
  s.state->record({due, done > due ? done - due : 0, failed});
  if (!failed) {
    s.recent[s.recent_next++ % s.recent.size()] = {due, done};
    if (s.fork_ns && due <= s.fork_ns && done >= s.fork_ns) s.fork_ns = 0;  // it waited through the fork
  }
}

void ProbeLoop::drop_connection(Slot& s, uint64_t now) {
  const uint64_t at = now ? now : proc::monotonic_ns();
  finish(s, at, true);  // the request out, if any
  if (s.client) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, s.client->fd(), nullptr);
  s.client.reset();
  const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(s.backoff.failed(Backoff::Clock::now()));
  s.retry_ns = at + static_cast<uint64_t>(wait.count());
}

}  // namespace thptrace::redis
