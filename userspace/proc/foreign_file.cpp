// SPDX-License-Identifier: Apache-2.0
#include "proc/foreign_file.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace thptrace::proc {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// openat2(2) with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS, O_PATH: glibc 2.36 has no wrapper.
int open_path_in_root(int root_fd, const std::string& path) {
#ifdef SYS_openat2
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  int fd;
  do {
    fd = static_cast<int>(::syscall(SYS_openat2, root_fd, path.c_str(), &how, sizeof how));
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
  return fd;
#else
  (void)root_fd;
  (void)path;
  errno = ENOSYS;
  return -1;
#endif
}

// From an O_PATH descriptor: the file opened for reading when it is regular and small enough.
ForeignFile reopen_for_reading(FileFd path_fd, uint64_t max_bytes) {
  ForeignFile out;
  struct stat st {};
  if (::fstat(path_fd.get(), &st) != 0) {
    out.error = errno_text(errno);
    return out;
  }
  if (!S_ISREG(st.st_mode)) {
    out.error = "not a regular file";
    return out;
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    out.error = fmt::format("{} bytes, more than the {} read", st.st_size, max_bytes);
    return out;
  }
  // Our own magic link to the file already found: no walk in the other filesystem again.
  const std::string self = "/proc/self/fd/" + std::to_string(path_fd.get());
  FileFd fd(::open(self.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  struct stat again {};
  if (!fd || ::fstat(fd.get(), &again) != 0) {
    out.error = errno_text(errno);
    return out;
  }
  if (again.st_dev != st.st_dev || again.st_ino != st.st_ino || !S_ISREG(again.st_mode) ||
      static_cast<uint64_t>(again.st_size) > max_bytes) {
    out.error = "the file changed while it was opened";
    return out;
  }
  out.fd = std::move(fd);
  out.size = static_cast<uint64_t>(again.st_size);
  return out;
}

}  // namespace

FileFd::~FileFd() {
  if (fd_ >= 0) ::close(fd_);
}

FileFd& FileFd::operator=(FileFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

ForeignFile open_in_root(int root_fd, const std::string& path, uint64_t max_bytes) {
  if (path.empty() || path.find('\0') != std::string::npos) return ForeignFile{{}, 0, "not a path"};
  FileFd path_fd(open_path_in_root(root_fd, path));
  if (!path_fd) {
    const int err = errno;
    ForeignFile out;
    out.error = err == ENOSYS ? "the kernel has no openat2(2) (Linux 5.6+), so it is not opened" : errno_text(err);
    return out;
  }
  return reopen_for_reading(std::move(path_fd), max_bytes);
}

ForeignFile open_process_file(pid_t pid, const std::string& path, uint64_t max_bytes,
                              const std::optional<MappedRange>& range) {
  const std::string proc = "/proc/" + std::to_string(pid);
  if (range && range->end > range->start) {
    // map_files is a magic link to the mapped file itself; opening it needs CAP_SYS_ADMIN (or
    // CAP_CHECKPOINT_RESTORE, Linux 5.9+): without, the walk from the root below.
    const std::string link = fmt::format("{}/map_files/{:x}-{:x}", proc, range->start, range->end);
    FileFd path_fd(::open(link.c_str(), O_PATH | O_CLOEXEC));
    if (path_fd) return reopen_for_reading(std::move(path_fd), max_bytes);
  }
  FileFd root(::open((proc + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return ForeignFile{{}, 0, "cannot open " + proc + "/root: " + errno_text(errno)};
  return open_in_root(root.get(), path, max_bytes);
}

std::optional<FileTimes> process_file_times(pid_t pid, const std::string& path, size_t head_bytes, std::string* error) {
  const auto file = open_process_file(pid, path, UINT64_MAX);
  if (!file.fd) {
    if (error) *error = file.error;
    return std::nullopt;
  }
  struct statx st = {};
  if (::statx(file.fd.get(), "", AT_EMPTY_PATH, STATX_BTIME | STATX_CTIME, &st) != 0 || !(st.stx_mask & STATX_CTIME)) {
    if (error) *error = "statx: " + errno_text(errno);
    return std::nullopt;
  }
  const auto seconds = [](const struct statx_timestamp& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
  };
  FileTimes t;
  t.change_s = seconds(st.stx_ctime);
  if ((st.stx_mask & STATX_BTIME) && st.stx_btime.tv_sec != 0) t.birth_s = seconds(st.stx_btime);
  t.head.resize(head_bytes);
  size_t got = 0;
  while (got < head_bytes) {
    const ssize_t n = ::pread(file.fd.get(), t.head.data() + got, head_bytes - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (error) *error = "read: " + errno_text(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  t.head.resize(got);
  return t;
}

FileFd open_process_socket(pid_t pid, const std::string& path, std::string* error) {
  const std::string root_path = "/proc/" + std::to_string(pid) + "/root";
  FileFd root(::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) {
    if (error) *error = "cannot open " + root_path + ": " + errno_text(errno);
    return {};
  }
  return open_socket_in_root(root.get(), path, error);
}

FileFd open_socket_in_root(int root_fd, const std::string& path, std::string* error) {
  if (path.empty() || path.find('\0') != std::string::npos) {
    if (error) *error = "not a path";
    return {};
  }
  FileFd fd(open_path_in_root(root_fd, path));
  if (!fd) {
    const int err = errno;
    if (error) *error = err == ENOSYS ? "the kernel has no openat2(2) (Linux 5.6+)" : errno_text(err);
    return {};
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    if (error) *error = "not a socket";
    return {};
  }
  return fd;
}

std::optional<std::string> read_process_file(pid_t pid, const std::string& path, uint64_t max_bytes,
                                             std::string* error) {
  ForeignFile f = open_process_file(pid, path, max_bytes);
  if (!f.fd) {
    if (error) *error = f.error;
    return std::nullopt;
  }
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(f.fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (error) *error = errno_text(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      if (error) *error = fmt::format("more than the {} bytes read", max_bytes);
      return std::nullopt;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace thptrace::proc
