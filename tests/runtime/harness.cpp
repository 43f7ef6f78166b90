// SPDX-License-Identifier: Apache-2.0
#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/core.h>

#include "proc/proc.h"
#include "tracer/probe.h"

namespace thptrace::test {

bool bpf_required() {
  const char* v = std::getenv("THPTRACE_REQUIRE_BPF");
  return v && std::string(v) == "1";
}

std::string bpf_unavailable_reason() {
  static const std::string reason = [] {
    if (::geteuid() != 0) return std::string("not root: the runtime tests load BPF programs");
    const auto m = tracer::choose_modes(false, "");
    if (!m.btf) return std::string("no kernel BTF");
    if (m.fork.mode == tracer::Mode::unavailable) return "BPF unavailable: " + m.fork.why;
    if (m.cow_fault.mode == tracer::Mode::unavailable) return "BPF unavailable: " + m.cow_fault.why;
    return std::string();
  }();
  return reason;
}

std::string thptrace_bin() { return THPTRACE_BIN; }

std::string expected_mode(const std::string& key) {
  const char* v = std::getenv("THPTRACE_EXPECT_MODES");
  std::istringstream in(v ? v : "");
  for (std::string kv; in >> kv;)
    if (kv.rfind(key + "=", 0) == 0) return kv.substr(key.size() + 1);
  return "";
}

void expect_modes(const nlohmann::json& modes, const std::string& context) {
  for (const char* family : {"fork", "cow_fault", "thp", "stall", "kernel_copies", "disk", "sched"}) {
    const std::string want = expected_mode(family);
    if (!want.empty()) {
      EXPECT_EQ(modes.value(family, ""), want) << family << " on this kernel: " << context;
    }
  }
}
std::string workload_bin() { return WORKLOAD_BIN; }

Process::Process(const std::vector<std::string>& argv) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) || ::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC)) throw std::runtime_error("pipe");
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  in_ = in[1];
  out_ = out[0];
  err_ = err[0];
  ::fcntl(out_, F_SETFL, O_NONBLOCK);
  ::fcntl(err_, F_SETFL, O_NONBLOCK);
}

Process::~Process() {
  if (!status_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    wait(std::chrono::seconds(10));
  }
  for (int fd : {in_, out_, err_})
    if (fd >= 0) ::close(fd);
}

void Process::write_stdin(const std::string& s) {
  const ssize_t n = ::write(in_, s.data(), s.size());
  (void)n;
}

void Process::drain() {
  char buf[65536];
  for (auto [fd, b] : {std::pair{out_, &out_buf_}, std::pair{err_, &err_buf_}}) {
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) b->append(buf, static_cast<size_t>(n));
  }
}

std::optional<std::string> Process::wait_line(int fd, std::string& buf, const std::string& needle,
                                              std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  size_t scanned = 0;
  while (true) {
    drain();
    for (size_t nl; (nl = buf.find('\n', scanned)) != std::string::npos; scanned = nl + 1) {
      const std::string line = buf.substr(scanned, nl - scanned);
      if (line.find(needle) != std::string::npos) return line;
    }
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 50);
    if ((p.revents & POLLHUP) && !(p.revents & POLLIN)) {
      drain();
      return std::nullopt;
    }
  }
}

std::optional<std::string> Process::wait_stdout_line(const std::string& needle, std::chrono::milliseconds timeout) {
  return wait_line(out_, out_buf_, needle, timeout);
}
std::optional<std::string> Process::wait_stderr_line(const std::string& needle, std::chrono::milliseconds timeout) {
  return wait_line(err_, err_buf_, needle, timeout);
}

void Process::signal(int sig) {
  if (!status_) ::kill(pid_, sig);
}

std::optional<int> Process::wait(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    drain();
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      drain();
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return status_;
    }
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string Process::out() {
  drain();
  return out_buf_;
}
std::string Process::err() {
  drain();
  return err_buf_;
}

int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  ::close(s);
  return port;
}

namespace {

// Removes the directories make_temp_dir made during a test when the test ends, failed or not: a
// failed ASSERT returns before the test's own clean-up.
class TempDirReaper : public ::testing::EmptyTestEventListener {
 public:
  static TempDirReaper& installed() {
    static TempDirReaper* reaper = [] {
      auto* r = new TempDirReaper;  // owned by gtest's listener list
      ::testing::UnitTest::GetInstance()->listeners().Append(r);
      return r;
    }();
    return *reaper;
  }
  void add(const std::string& dir) {
    std::lock_guard lock(mu_);
    dirs_.push_back(dir);
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::lock_guard lock(mu_);
    for (const auto& d : dirs_) {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
    dirs_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::string> dirs_;
};

}  // namespace

std::string make_temp_dir(const std::string& prefix, TempDirLife life) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp");
  if (life == TempDirLife::test && ::testing::UnitTest::GetInstance()->current_test_info())
    TempDirReaper::installed().add(tmpl);
  return tmpl;
}

std::optional<ServerBuild> fetched_server(const std::string& name, std::string* why) {
  Process fetch({"bash", SERVERS_FETCH});
  const auto code = fetch.wait(std::chrono::minutes(30));
  if (code != 0) {
    *why = "tests/servers/fetch.sh failed: " + fetch.err();
    return std::nullopt;
  }
  std::istringstream lines(fetch.out());
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string n, server, cli;
    fields >> n >> server >> cli;
    if (n == name) {
      const bool valkey = n.rfind("valkey", 0) == 0;
      return ServerBuild{n, server, valkey ? "dual-channel-replication-enabled" : "repl-rdb-channel"};
    }
  }
  *why = "tests/servers/fetch.sh did not name " + name + ": " + fetch.out();
  return std::nullopt;
}

RedisServer::RedisServer(const std::vector<std::string>& extra_args, int port, const std::string& binary) {
  dir_ = make_temp_dir("thptrace-redis-");
  port_ = port ? port : free_port();
  std::vector<std::string> argv = {binary, "--bind", "127.0.0.1", "--port", std::to_string(port_),
                                   "--dir", dir_, "--save", "", "--appendonly", "no", "--daemonize", "no",
                                   "--enable-debug-command", "local", "--logfile", dir_ + "/redis.log"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  for (size_t i = 0; i + 1 < extra_args.size(); ++i)
    if (extra_args[i] == "--requirepass") password_ = extra_args[i + 1];
  proc_ = std::make_unique<Process>(argv);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    if (auto c = client(); c && c->command({"PING"}) == "PONG") return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error(binary + " did not start on port " + std::to_string(port_));
}

RedisServer::~RedisServer() {
  if (auto c = client()) c->command({"SHUTDOWN", "NOSAVE"});
  if (!proc_->wait(std::chrono::seconds(10))) proc_->signal(SIGKILL);
  proc_.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::unique_ptr<redis::Client> RedisServer::client() const {
  std::string error;
  return redis::Client::connect({"127.0.0.1", port_}, password_, std::chrono::milliseconds(5000), &error);
}

std::string RedisServer::cmd(const std::vector<std::string>& args) const {
  auto c = client();
  if (!c) throw std::runtime_error("cannot connect to redis on " + std::to_string(port_));
  auto r = c->command(args);
  if (!r) throw std::runtime_error(args[0] + " failed: " + c->last_error());
  return *r;
}

std::string RedisServer::info_field(const std::string& key) const {
  return redis::info_str(redis::parse_info(cmd({"INFO", "everything"})), key);
}

namespace {

struct LoadedProgram {
  uint32_t id;
  std::string name;
};

std::vector<LoadedProgram> loaded_bpf_programs() {
  std::vector<LoadedProgram> progs;
  FILE* f = ::popen("bpftool -j prog show 2>/dev/null", "r");
  if (!f) return progs;
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  ::pclose(f);
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_array())
    for (const auto& p : j)
      if (p.contains("name") && p.contains("id")) progs.push_back({p["id"].get<uint32_t>(), p["name"].get<std::string>()});
  return progs;
}

// Program ids some live process holds, directly or through a link (fdinfo's "prog_id:" lines).
std::set<uint32_t> program_ids_held_by_processes() {
  std::set<uint32_t> held;
  for (const auto& proc_dir : std::filesystem::directory_iterator("/proc")) {
    const auto fdinfo = proc_dir.path() / "fdinfo";
    std::error_code ec;
    for (const auto& fd : std::filesystem::directory_iterator(fdinfo, ec)) {
      std::ifstream in(fd.path());
      std::string line;
      while (std::getline(in, line))
        if (line.rfind("prog_id:", 0) == 0) held.insert(static_cast<uint32_t>(std::stoul(line.substr(8))));
    }
  }
  return held;
}

}  // namespace

std::vector<std::string> loaded_bpf_program_names() {
  std::vector<std::string> names;
  for (const auto& p : loaded_bpf_programs()) names.push_back(p.name);
  return names;
}

std::vector<std::string> leftover_thptrace_programs() {
  // BPF object names are cut to 15 characters.
  static const std::set<std::string> ours = {
      "fork_btf", "fork_raw", "exit_btf", "exit_raw", "fork_btf_compat", "fork_raw_compat", "exit_btf_compat",
      "exit_raw_compat", "sys_enter_btf", "sys_enter_raw", "sys_exit_btf",
      "sys_exit_raw", "wp_fentry", "wp_fexit", "huge_wp_fentry", "huge_wp_fexit", "fault_btf", "fault_raw",
      "page_alloc_btf", "page_alloc_raw", "khugepaged_scan", "collapse_btf", "collapse_raw", "compaction_begi",
      "compaction_end_", "reclaim_begin_b", "reclaim_begin_r", "reclaim_end_btf", "reclaim_end_raw",
      "rdb_bgsave_ente", "rdb_bgsave_exit", "rdb_sockets_ent", "rdb_sockets_exi", "aof_rewrite_ent",
      "aof_rewrite_exi", "repl_bgsave_ent", "repl_bgsave_exi", "redis_fork_ente", "redis_fork_exit",
      "libc_fork_enter", "libc_fork_exit", "thptrace_probe"};
  // A program of ours that no live process holds is a leak (pinned, or kept by an attachment that
  // outlived its owner). Programs another running thptrace holds are not this test's. The kernel
  // frees a program after its last reference goes, which for tracing links can be an RCU grace
  // period later: look again for a few seconds before calling it a leak.
  std::vector<std::string> left;
  for (int attempt = 0; attempt < 50; ++attempt) {
    left.clear();
    const auto progs = loaded_bpf_programs();
    const auto held = program_ids_held_by_processes();
    for (const auto& p : progs)
      if (ours.count(p.name) && !held.count(p.id)) left.push_back(p.name);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return left;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  auto j = nlohmann::json::parse(in);
  // Every report a real capture wrote is held to the published schema too: on the host, where the
  // source tree is always visible. A kernel-matrix guest hides a tree under /tmp (its own tmpfs), and
  // the same tests' reports are checked on the host run.
  const char* vm = std::getenv("THPTRACE_VM");
  if (vm && std::string(vm) == "1") return j;
  const std::string check = std::string("/usr/bin/python3 ") + REPORT_SCHEMA_CHECK + " --strict " + REPORT_SCHEMA +
                            " '" + path + "' >/dev/null";
  if (std::system(check.c_str()) != 0)
    throw std::runtime_error(path + " does not match docs/reference/report.schema.json");
  return j;
}

std::optional<std::string> http_get(int port, const std::string& path) {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return std::nullopt;
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::write(s, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(s);
    return std::nullopt;
  }
  std::string resp;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(s, buf, sizeof buf)) > 0) resp.append(buf, static_cast<size_t>(n));
  ::close(s);
  const auto body = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.", 0) != 0 || body == std::string::npos) return std::nullopt;
  return resp.substr(body + 4);
}

std::optional<double> metric_value(const std::string& scrape, const std::string& series) {
  size_t pos = 0;
  while ((pos = scrape.find(series + " ", pos)) != std::string::npos) {
    if (pos == 0 || scrape[pos - 1] == '\n') return std::stod(scrape.substr(pos + series.size() + 1));
    pos += series.size();
  }
  return std::nullopt;
}

std::optional<double> metric_value_with(const std::string& scrape, const std::string& name,
                                        const std::map<std::string, std::string>& labels) {
  std::optional<double> found;
  std::istringstream lines(scrape);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    const auto close = line.rfind("} ");
    if (close == std::string::npos) continue;
    const std::string set = line.substr(name.size() + 1, close - name.size() - 1);
    const bool all = std::all_of(labels.begin(), labels.end(), [&](const auto& kv) {
      const std::string pair = kv.first + "=\"" + kv.second + "\"";
      const auto at = set.find(pair);
      return at != std::string::npos && (at == 0 || set[at - 1] == ',') &&
             (at + pair.size() == set.size() || set[at + pair.size()] == ',');
    });
    if (!all) continue;
    if (found) return std::nullopt;  // more than one
    found = std::stod(line.substr(close + 2));
  }
  return found;
}

namespace {
std::mutex g_thp_mu;
// (file, the mode it had) for each guard alive, in the order they were made.
std::vector<std::pair<std::string, std::string>> g_thp_saved;

void write_thp(const std::string& path, const std::string& mode) {
  std::ofstream out(path);
  out << mode;
}

void restore_thp_at_exit() {
  for (auto it = g_thp_saved.rbegin(); it != g_thp_saved.rend(); ++it) write_thp(it->first, it->second);
  g_thp_saved.clear();
}

void restore_thp_on_signal(int sig) {
  restore_thp_at_exit();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}
}  // namespace

bool ThpModeGuard::writable() { return ::access(proc::kThpEnabledPath, W_OK) == 0; }

ThpModeGuard::ThpModeGuard(const std::string& mode, std::string path) : path_(std::move(path)) {
  std::lock_guard lock(g_thp_mu);
  saved_ = proc::parse_bracketed_mode(proc::read_file(path_).value_or(""));
  static bool hooked = false;
  if (!hooked) {
    std::atexit(restore_thp_at_exit);
    for (int sig : {SIGINT, SIGTERM, SIGABRT, SIGSEGV}) ::signal(sig, restore_thp_on_signal);
    hooked = true;
  }
  g_thp_saved.emplace_back(path_, saved_);
  write_thp(path_, mode);
}

ThpModeGuard::~ThpModeGuard() {
  std::lock_guard lock(g_thp_mu);
  write_thp(path_, saved_);
  const auto it = std::find(g_thp_saved.rbegin(), g_thp_saved.rend(), std::pair{path_, saved_});
  if (it != g_thp_saved.rend()) g_thp_saved.erase(std::next(it).base());
}

MemoryCgroup::MemoryCgroup() {
  const std::string name = "thptrace-test-" + std::to_string(::getpid());
  if (std::filesystem::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {
    version_ = 1;
    dir_ = "/sys/fs/cgroup/memory/" + name;
  } else if (proc::read_file("/sys/fs/cgroup/cgroup.subtree_control", 4096).value_or("").find("memory") !=
             std::string::npos) {
    version_ = 2;
    dir_ = "/sys/fs/cgroup/" + name;
  } else {
    return;
  }
  std::error_code ec;
  std::filesystem::create_directory(dir_, ec);
  if (ec) dir_.clear();
}

MemoryCgroup::~MemoryCgroup() {
  if (dir_.empty()) return;
  for (int i = 0; i < 50 && ::rmdir(dir_.c_str()) != 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

bool MemoryCgroup::add(pid_t pid) const {
  return static_cast<bool>(std::ofstream(dir_ + "/cgroup.procs") << pid << "\n");
}

uint64_t MemoryCgroup::read(const std::string& v1, const std::string& v2) const {
  return std::stoull(proc::read_file(dir_ + "/" + (version_ == 1 ? v1 : v2), 64).value_or("0"));
}

bool MemoryCgroup::set_limit(uint64_t bytes) const {
  return static_cast<bool>(std::ofstream(dir_ + "/" + (version_ == 1 ? "memory.limit_in_bytes" : "memory.max"))
                           << bytes << "\n");
}

const char* write_pattern_name(WritePattern p) {
  switch (p) {
    case WritePattern::uniform: return "uniform";
    case WritePattern::hot: return "hot";
    case WritePattern::growing: return "growing";
  }
  return "uniform";
}

void print_predict_outcome(const std::string& what, const std::string& figure, const std::string& method, double value,
                           double low, double high, double truth) {
  std::cout << fmt::format("predict-outcome {} | {} | {} | value {:.6g} low {:.6g} high {:.6g} truth {:.6g}\n", what,
                           figure, method, value, low, high, truth);
}

}  // namespace thptrace::test
