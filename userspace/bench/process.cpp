// SPDX-License-Identifier: Apache-2.0
#include "bench/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench/bench.h"
#include "proc/proc.h"

namespace thptrace::bench {
namespace {

using namespace std::chrono_literals;

// A port the kernel just handed out for 127.0.0.1. Another process may take it before
// redis-server binds it; RedisInstance retries with a new one when that happens.
int pick_free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw BenchError(fmt::format("cannot create a socket: {}", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(s);
  if (!ok) throw BenchError(fmt::format("cannot find a free port on 127.0.0.1: {}", std::strerror(errno)));
  return ntohs(a.sin_port);
}

std::string tail_of_file(const std::filesystem::path& path, size_t lines) {
  const std::string text = proc::read_file(path.string()).value_or("");
  std::vector<std::string> all;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    if (!out.empty()) out += " / ";
    out += all[i];
  }
  return out;
}

}  // namespace

bool sleep_unless(std::chrono::nanoseconds d, const std::atomic<bool>& interrupted) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (!interrupted.load()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return true;
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(until - now, 20ms));
  }
  return false;
}

std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// ChildProcess

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::filesystem::path& stdout_path,
                           const std::filesystem::path& stderr_path, int death_signal, const std::string& path) {
  // Everything the child needs is prepared before fork(): between fork and exec in a threaded
  // program only async-signal-safe calls are allowed.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const char* exec_path = path.empty() ? args[0] : path.c_str();
  const int out = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (out < 0 || err < 0 || null < 0) {
    const int e = errno;
    for (int fd : {out, err, null})
      if (fd >= 0) ::close(fd);
    throw BenchError(fmt::format("cannot open the output files of {}: {}", argv[0], std::strerror(e)));
  }
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, death_signal);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);  // an ignored disposition would survive exec
    ::dup2(null, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execv(exec_path, args.data());
    static const char msg[] = "exec failed\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  const int fork_errno = errno;
  for (int fd : {out, err, null}) ::close(fd);
  if (pid_ < 0) throw BenchError(fmt::format("cannot start {}: {}", argv[0], std::strerror(fork_errno)));
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !poll_exit()) {
    ::kill(pid_, SIGKILL);
    wait_exit(10s);
  }
}

std::optional<int> ChildProcess::poll_exit() {
  if (status_ || pid_ <= 0) return status_;
  int st = 0;
  pid_t r;
  do r = ::waitpid(pid_, &st, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == pid_) status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return status_;
}

std::optional<int> ChildProcess::wait_exit(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!poll_exit()) {
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(10ms);
  }
  return status_;
}

void ChildProcess::signal(int sig) {
  if (pid_ > 0 && !poll_exit()) ::kill(pid_, sig);
}

// ---------------------------------------------------------------------------------------------
// RedisInstance

RedisInstance::RedisInstance(const std::string& server, std::filesystem::path dir,
                             const std::vector<std::string>& extra_args)
    : dir_(std::move(dir)) {
  std::filesystem::create_directories(dir_);
  const auto log = dir_ / "redis.log";
  std::string last_error;
  // A port picked free can be taken before redis-server binds it: try a few.
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = pick_free_port();
    std::vector<std::string> argv = {server,
                                     "--bind",
                                     "127.0.0.1",
                                     "--port",
                                     std::to_string(port_),
                                     "--dir",
                                     dir_.string(),
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no",
                                     "--logfile",
                                     log.string(),
                                     "--protected-mode",
                                     "yes"};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    process_ = std::make_unique<ChildProcess>(argv, dir_ / "stdout.txt", dir_ / "stderr.txt", SIGKILL);
    pid_ = process_->pid();
    const auto until = std::chrono::steady_clock::now() + 15s;
    while (std::chrono::steady_clock::now() < until && !process_->poll_exit()) {
      std::string error;
      client_ = redis::Client::connect({"127.0.0.1", port_}, "", 10s, &error);
      if (client_ && client_->command({"PING"}) == "PONG") return;
      client_.reset();
      last_error = error;
      std::this_thread::sleep_for(20ms);
    }
    if (!process_->poll_exit()) process_->signal(SIGKILL);
    process_->wait_exit(10s);
    last_error = tail_of_file(log, 2);
  }
  throw BenchError(fmt::format("{} would not start in {}: {}", server, dir_.string(),
                               last_error.empty() ? "no log line" : last_error));
}

RedisInstance::~RedisInstance() {
  try {
    stop();
  } catch (...) {
    // A destructor must not throw; stop() already escalated to SIGKILL where it could.
  }
  if (!keep_dir_) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void RedisInstance::stop() {
  if (!process_ || process_->poll_exit()) return;
  client_.reset();
  std::string error;
  if (auto c = redis::Client::connect({"127.0.0.1", port_}, "", 5s, &error))
    c->command({"SHUTDOWN", "NOSAVE"});  // no reply comes: the server is gone
  if (!process_->wait_exit(15s)) {
    process_->signal(SIGKILL);
    process_->wait_exit(10s);
  }
}

redis::Client& RedisInstance::client() {
  if (!client_ || client_->broken()) {
    std::string error;
    client_ = redis::Client::connect({"127.0.0.1", port_}, "", 30s, &error);
    if (!client_) throw BenchError(error);
  }
  return *client_;
}

std::string RedisInstance::command(const std::vector<std::string>& args) {
  for (int attempt = 0;; ++attempt) {
    auto& c = client();
    if (auto reply = c.command(args)) return *reply;
    if (!c.broken() || attempt == 1)
      throw BenchError(fmt::format("{} on the redis-server at {} failed: {}", args.front(), address(), c.last_error()));
  }
}

redis::InfoMap RedisInstance::info(const std::string& section) { return redis::parse_info(command({"INFO", section})); }

std::map<std::string, std::string> RedisInstance::config_get(const std::vector<std::string>& keys) {
  return client().config_get(keys);
}

std::string RedisInstance::info_field(const std::string& section, const std::string& key) {
  return redis::info_str(info(section), key);
}

// ---------------------------------------------------------------------------------------------
// Capture

Capture::Capture(const std::string& thptrace, pid_t pid, const std::string& redis_address,
                 const std::filesystem::path& json_path, const std::atomic<bool>& interrupted)
    : json_path_(json_path) {
  auto stem = json_path.parent_path() / json_path.stem();
  log_path_ = stem.string() + ".log";
  // SIGTERM on our death: the capture then writes its report and releases its BPF links.
  process_ =
      std::make_unique<ChildProcess>(std::vector<std::string>{"thptrace", "--pid", std::to_string(pid), "--redis",
                                                              redis_address, "--json", json_path.string()},
                                     stem.string() + ".txt", log_path_, SIGTERM, thptrace);
  const auto until = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    if (proc::read_file(log_path_.string()).value_or("").find("tracing pid") != std::string::npos) return;
    if (auto code = process_->poll_exit())
      throw BenchError(fmt::format("the thptrace capture exited with code {} before tracing: {}", *code, log_tail()));
    if (interrupted.load()) throw Interrupted();
    if (std::chrono::steady_clock::now() >= until)
      throw BenchError(fmt::format("the thptrace capture did not start tracing within 60 s: {}", log_tail()));
    std::this_thread::sleep_for(10ms);
  }
}

Capture::~Capture() { stop(); }

std::optional<int> Capture::stop() {
  if (!process_) return std::nullopt;
  if (auto code = process_->poll_exit()) return code;
  process_->signal(SIGINT);
  if (auto code = process_->wait_exit(60s)) return code;
  process_->signal(SIGKILL);
  process_->wait_exit(10s);
  return std::nullopt;
}

std::string Capture::log_tail() const { return tail_of_file(log_path_, 3); }

}  // namespace thptrace::bench
