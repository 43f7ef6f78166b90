// SPDX-License-Identifier: Apache-2.0
#include "redis/transport.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>
#include <utility>

#include "common/caps.h"
#include "proc/foreign_file.h"

namespace thptrace::redis {
namespace {

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = o.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

int ms_left(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, INT_MAX));
}

// Waits until fd is ready for `events`; false on timeout or a poll error.
bool wait_fd(int fd, short events, Deadline deadline) {
  pollfd p{fd, events, 0};
  while (true) {
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

std::string errno_text(int err) { return std::strerror(err); }

std::string timeout_sentence(const std::string& where, const char* what) {
  return std::string("Redis at ") + where + " did not " + what + " in time";
}

// OpenSSL writes to the socket with write(2): a peer that closed would raise SIGPIPE and end the
// process. Blocks it on this thread around the call and swallows one raised meanwhile (the way
// libpq does), leaving a SIGPIPE that was already pending alone.
template <typename F>
int without_sigpipe(F&& call) {
  sigset_t pipe_only, old, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  const int saved_errno_before = errno;
  const int ret = call();
  const int call_errno = errno;
  if (!was_pending) {
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) {
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = call_errno ? call_errno : saved_errno_before;
  return ret;
}

class PlainTransport : public Transport {
 public:
  PlainTransport(Fd fd, std::string where) : fd_(std::move(fd)), where_(std::move(where)) {}

  bool write_all(std::string_view data, Deadline deadline, std::string* error) override {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        if (!wait_fd(fd_.get(), POLLOUT, deadline)) return fail(error, timeout_sentence(where_, "take the command"));
      } else {
        return fail(error, "cannot write to Redis at " + where_ + ": " + errno_text(errno));
      }
    }
    return true;
  }

  size_t read_some(char* buf, size_t size, Deadline deadline, std::string* error) override {
    while (true) {
      const ssize_t n = read_now(buf, size, error);
      if (n > 0) return static_cast<size_t>(n);
      if (n < 0) return 0;
      if (!wait_fd(fd_.get(), POLLIN, deadline)) return fail(error, timeout_sentence(where_, "reply")), 0;
    }
  }

  ssize_t read_now(char* buf, size_t size, std::string* error) override {
    while (true) {
      const ssize_t n = ::recv(fd_.get(), buf, size, 0);
      if (n > 0) return n;
      if (n == 0) return fail(error, "Redis at " + where_ + " closed the connection"), -1;
      if (errno == EAGAIN) return 0;
      if (errno != EINTR) return fail(error, "cannot read from Redis at " + where_ + ": " + errno_text(errno)), -1;
    }
  }

  int fd() const override { return fd_.get(); }

 private:
  static bool fail(std::string* error, const std::string& sentence) {
    if (error) *error = sentence;
    return false;
  }
  Fd fd_;
  std::string where_;
};

class TlsTransport : public Transport {
 public:
  TlsTransport(Fd fd, SSL* ssl, std::string where, std::string name)
      : fd_(std::move(fd)), ssl_(ssl), where_(std::move(where)), name_(std::move(name)) {}
  ~TlsTransport() override {
    // A close_notify if the socket takes it at once; nothing waits for the server's.
    if (ssl_) {
      without_sigpipe([this] { return SSL_shutdown(ssl_); });
      ERR_clear_error();
      SSL_free(ssl_);
    }
  }
  TlsTransport(const TlsTransport&) = delete;
  TlsTransport& operator=(const TlsTransport&) = delete;

  // Runs the handshake; "" when done, else the sentence of the failure.
  std::string handshake(Deadline deadline, bool* tls_failure) {
    *tls_failure = false;
    while (true) {
      ERR_clear_error();
      errno = 0;
      const int ret = without_sigpipe([this] { return SSL_connect(ssl_); });
      if (ret == 1) return {};
      if (!wait_for(ret, deadline)) {
        if (last_code_ == SSL_ERROR_WANT_READ || last_code_ == SSL_ERROR_WANT_WRITE) {
          ERR_clear_error();
          return "Redis at " + where_ + " did not complete the TLS handshake in time: is that its tls-port?";
        }
        *tls_failure = true;
        return tls_failure_text(ret);
      }
    }
  }

  bool write_all(std::string_view data, Deadline deadline, std::string* error) override {
    // SSL_write without partial writes sends all of it or asks to be called again with the same data.
    while (!data.empty()) {
      ERR_clear_error();
      errno = 0;
      const int ret = without_sigpipe([&] { return SSL_write(ssl_, data.data(), static_cast<int>(std::min<size_t>(data.size(), INT_MAX))); });
      if (ret > 0) {
        data.remove_prefix(static_cast<size_t>(ret));
        continue;
      }
      if (!wait_for(ret, deadline)) {
        if (error) *error = timed_out() ? timeout_sentence(where_, "take the command") : tls_failure_text(ret);
        return false;
      }
    }
    return true;
  }

  size_t read_some(char* buf, size_t size, Deadline deadline, std::string* error) override {
    while (true) {
      ERR_clear_error();
      errno = 0;
      const int ret = without_sigpipe([&] { return SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(size, INT_MAX))); });
      if (ret > 0) {
        if (!std::exchange(answered_, true)) tls_answered(ssl_);
        return static_cast<size_t>(ret);
      }
      if (!wait_for(ret, deadline)) {
        if (error) *error = timed_out() ? timeout_sentence(where_, "reply") : tls_failure_text(ret);
        return 0;
      }
    }
  }

  ssize_t read_now(char* buf, size_t size, std::string* error) override {
    ERR_clear_error();
    errno = 0;
    const int ret =
        without_sigpipe([&] { return SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(size, INT_MAX))); });
    if (ret > 0) {
      if (!std::exchange(answered_, true)) tls_answered(ssl_);
      return ret;
    }
    last_code_ = SSL_get_error(ssl_, ret);
    // A record not whole yet (or a renegotiation's write): nothing for the caller this time.
    if (last_code_ == SSL_ERROR_WANT_READ || last_code_ == SSL_ERROR_WANT_WRITE) return 0;
    if (error) *error = tls_failure_text(ret);
    return -1;
  }

  int fd() const override { return fd_.get(); }

 private:
  // After a call that returned ret <= 0: waits for what OpenSSL wants and returns true to retry;
  // false when it failed for good, or the wait timed out (then timed_out()).
  bool wait_for(int ret, Deadline deadline) {
    last_code_ = SSL_get_error(ssl_, ret);
    waited_out_ = false;
    if (last_code_ == SSL_ERROR_WANT_READ || last_code_ == SSL_ERROR_WANT_WRITE) {
      if (wait_fd(fd_.get(), last_code_ == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) return true;
      waited_out_ = true;
    }
    return false;
  }
  bool timed_out() const { return waited_out_; }
  std::string tls_failure_text(int ret) { return tls_failure(ssl_, ret, last_code_, where_, name_); }

  Fd fd_;
  SSL* ssl_;
  std::string where_, name_;
  int last_code_ = 0;
  bool waited_out_ = false;
  bool answered_ = false;
};

// A socket made in the network namespace of pid: a thread of our own joins it (setns changes the
// calling thread's namespace only), makes the socket, and ends; the socket stays in that namespace.
// Needs CAP_SYS_ADMIN; without it discovery reaches a container by its own addresses (Route::outside).
// A poller's thread holds it permitted but not effective: only this short-lived thread raises it.
int socket_in_netns(pid_t pid, int family, int* err) {
  if (pid == 0) {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    *err = fd < 0 ? errno : 0;
    return fd;
  }
  int fd = -1;
  std::thread([&] {
    const EffectiveForScope raised({CAP_SYS_ADMIN, CAP_SYS_PTRACE});
    const Fd ns(::open(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
    if (ns.get() < 0 || ::setns(ns.get(), CLONE_NEWNET) != 0) {
      *err = errno;
      return;
    }
    fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    *err = fd < 0 ? errno : 0;
  }).join();
  return fd;
}

// Connects fd to sa; "" when connected, else why not.
std::string connect_fd(int fd, const sockaddr* sa, socklen_t len, Deadline deadline) {
  if (::connect(fd, sa, len) == 0) return {};
  if (errno != EINPROGRESS && errno != EAGAIN && errno != EINTR) return errno_text(errno);
  if (!wait_fd(fd, POLLOUT, deadline)) return "connection timed out";
  int err = 0;
  socklen_t err_len = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0) return errno_text(errno);
  return err ? errno_text(err) : std::string();
}

Fd connect_unix(const Address& addr, pid_t netns_pid, Deadline deadline, std::string* why) {
  // Through the process's root when it is not ours, resolved inside it (an absolute symlink there
  // stays there: proc/foreign_file.h): /proc/PID/root/PATH may be longer than sun_path holds, so the
  // socket file is opened with O_PATH and reached as /proc/self/fd/N.
  std::string path = addr.path;
  proc::FileFd path_fd;
  if (netns_pid != 0) {
    {
      const EffectiveForScope raised({CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH});
      path_fd = proc::open_process_socket(netns_pid, addr.path, why);
    }
    if (!path_fd) return Fd();
    path = "/proc/self/fd/" + std::to_string(path_fd.get());
  }
  int err = 0;
  Fd fd(socket_in_netns(0, AF_UNIX, &err));
  if (fd.get() < 0) {
    *why = errno_text(err);
    return Fd();
  }
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.c_str(), std::min(path.size(), sizeof(sa.sun_path) - 1));
  {
    // Connecting needs write access to the socket file (a 0700 socket of the redis user, say).
    const EffectiveForScope raised({CAP_DAC_OVERRIDE});
    *why = connect_fd(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa, deadline);
  }
  return why->empty() ? std::move(fd) : Fd();
}

Fd connect_tcp(const Address& addr, pid_t netns_pid, Deadline deadline, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (const int rc = ::getaddrinfo(addr.host.c_str(), std::to_string(addr.port).c_str(), &hints, &list); rc != 0) {
    *why = gai_strerror(rc);
    return Fd();
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(list, ::freeaddrinfo);
  *why = "no address";
  for (const addrinfo* ai = list; ai; ai = ai->ai_next) {
    int err = 0;
    Fd fd(socket_in_netns(netns_pid, ai->ai_family, &err));
    if (fd.get() < 0) {
      *why = errno_text(err);
      continue;
    }
    *why = connect_fd(fd.get(), ai->ai_addr, ai->ai_addrlen, deadline);
    if (why->empty()) {
      const int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
  }
  return Fd();
}

// Whether addr answers a plain PING (with anything a Redis says: +PONG, -NOAUTH, ...). Asked only
// after a TLS handshake got no answer: a plain Redis reads a ClientHello as an inline command that
// never ends (its first NUL stops the search for a newline) and stays silent, like a frozen server.
bool speaks_plain_redis(const Address& addr, pid_t netns_pid) {
  const Deadline deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
  std::string why;
  Fd fd = connect_tcp(addr, netns_pid, deadline, &why);
  if (fd.get() < 0) return false;
  PlainTransport t(std::move(fd), addr.str());
  char reply[1];
  return t.write_all("*1\r\n$4\r\nPING\r\n", deadline, &why) && t.read_some(reply, 1, deadline, &why) == 1 &&
         (reply[0] == '+' || reply[0] == '-');
}

}  // namespace

std::string netns_entry_error(pid_t pid) {
  std::string why;
  std::thread([&] {
    const Fd ns(::open(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
    if (ns.get() < 0 || ::setns(ns.get(), CLONE_NEWNET) != 0) why = errno_text(errno);
  }).join();
  return why;
}

std::unique_ptr<Transport> connect_transport(const Address& addr, const TlsContext* tls, pid_t netns_pid,
                                             std::chrono::milliseconds timeout, ConnectError* error) {
  const Deadline deadline = std::chrono::steady_clock::now() + timeout;
  const std::string where = addr.str();
  std::string why;
  Fd fd = addr.is_unix() ? connect_unix(addr, netns_pid, deadline, &why) : connect_tcp(addr, netns_pid, deadline, &why);
  if (fd.get() < 0) {
    if (error) *error = {"cannot connect to Redis at " + where + ": " + why, false};
    return nullptr;
  }
  if (!tls) return std::make_unique<PlainTransport>(std::move(fd), where);

  SSL* ssl = SSL_new(tls->ctx());
  const std::string name = tls->options().server_name.empty() ? addr.host : tls->options().server_name;
  if (!ssl || !tls_prepare(ssl, name) || SSL_set_fd(ssl, fd.get()) != 1) {
    if (ssl) SSL_free(ssl);
    ERR_clear_error();
    if (error) *error = {"cannot set up TLS to Redis at " + where + " for the name " + name + ".", true};
    return nullptr;
  }
  auto t = std::make_unique<TlsTransport>(std::move(fd), ssl, where, name);
  bool tls_failed = false;
  if (std::string failure = t->handshake(deadline, &tls_failed); !failure.empty()) {
    if (!tls_failed && speaks_plain_redis(addr, netns_pid)) {
      failure = "Redis at " + where + " does not speak TLS (it answered a plain PING): give the address of its "
                "tls-port, or drop --redis-tls for its plain port.";
      tls_failed = true;
    }
    if (error) *error = {failure, tls_failed};
    return nullptr;
  }
  return t;
}

}  // namespace thptrace::redis
