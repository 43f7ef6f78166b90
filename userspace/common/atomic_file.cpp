// SPDX-License-Identifier: Apache-2.0
#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace thptrace {
namespace {

// An fd closed on every path out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, for the error close() may report (NFS reports write errors there).
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

bool fail(std::string* error, const char* step, int err) {
  if (error) *error = std::string(std::strerror(err)) + " (" + step + ")";
  return false;
}

// ".NAME.<16 hex digits>.tmp": hidden, and unguessable so that no one can place a file or a
// symlink there first (O_EXCL refuses one anyway).
std::string temporary_name(const std::string& base) {
  unsigned char bytes[8] = {};
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // never on Linux >= 3.17 once booted; O_EXCL still holds
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name = "." + base + ".";
  for (unsigned char b : bytes) {
    name += kHex[b >> 4];
    name += kHex[b & 0xF];
  }
  return name + ".tmp";
}

bool write_all(int fd, std::string_view content) {
  while (!content.empty()) {
    const ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    content.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

bool write_file_atomically(const std::string& path, std::string_view content, std::string* error) {
  const std::filesystem::path p(path);
  const std::string base = p.filename().string();
  if (base.empty() || base == "." || base == "..") return fail(error, "not a file name", EISDIR);
  const std::string dir = p.parent_path().empty() ? std::string(".") : p.parent_path().string();
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.get() < 0) return fail(error, "opening its directory", errno);

  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    tmp = temporary_name(base);
    fd = ::openat(d.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return fail(error, "creating a temporary file", errno);
  Fd f(fd);
  const auto abandon = [&](const char* step) {
    const int err = errno;
    ::unlinkat(d.get(), tmp.c_str(), 0);
    return fail(error, step, err);
  };
  if (!write_all(f.get(), content)) return abandon("writing");
  if (::fsync(f.get()) != 0) return abandon("flushing to disk");
  if (f.close() != 0) return abandon("closing");
  if (::renameat(d.get(), tmp.c_str(), d.get(), base.c_str()) != 0) return abandon("renaming into place");
  // The rename is durable once the directory is; a file system that cannot sync a directory says
  // EINVAL, and the file is in place either way.
  if (::fsync(d.get()) != 0 && errno != EINVAL) return fail(error, "flushing its directory", errno);
  return true;
}

}  // namespace thptrace
