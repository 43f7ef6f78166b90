// SPDX-License-Identifier: Apache-2.0
#pragma once
// Opens a file of another process's filesystem (a container's binaries and libraries) as that
// process sees it, and nothing else: never a host file an absolute symlink or a /proc magic link in
// the container points at, never a FIFO or a device (opening either can block or act), never a file
// larger than its reader bounds. Everything the process's filesystem holds is hostile input.
//
// A file the process maps is opened through /proc/PID/map_files/START-END: the exact file behind the
// mapping, with no path walk at all (needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE). Otherwise the
// path is walked by openat2(2) from the process's root (/proc/PID/root) with RESOLVE_IN_ROOT, so
// absolute symlinks and ".." stay inside it, and RESOLVE_NO_MAGICLINKS (Linux 5.6; ENOSYS refuses).
// Either way the file is first opened with O_PATH, which neither blocks nor reaches a driver, checked
// to be a regular file within the size limit, and only then opened for reading through our own
// /proc/self/fd link.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace thptrace::proc {

// An owned file descriptor; move-only.
class FileFd {
 public:
  FileFd() = default;
  explicit FileFd(int fd) : fd_(fd) {}
  ~FileFd();
  FileFd(FileFd&& o) noexcept : fd_(o.release()) {}
  FileFd& operator=(FileFd&& o) noexcept;
  FileFd(const FileFd&) = delete;
  FileFd& operator=(const FileFd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A file opened for reading, or why not.
struct ForeignFile {
  FileFd fd;  // O_RDONLY | O_NONBLOCK | O_CLOEXEC, a regular file; invalid on failure
  uint64_t size = 0;
  std::string error;  // one clause when fd is invalid
};

// Bounds for what readers take: an ELF file (a binary, a library, its debug file) and a text file.
inline constexpr uint64_t kMaxElfBytes = uint64_t{1} << 30;
inline constexpr uint64_t kMaxTextBytes = uint64_t{16} << 20;

// One mapping of the process, [start, end) as /proc/PID/maps writes it.
struct MappedRange {
  uint64_t start = 0, end = 0;
};

// `path` (absolute or not, taken from `root_fd`) resolved inside the directory root_fd as if it
// were "/".
ForeignFile open_in_root(int root_fd, const std::string& path, uint64_t max_bytes);

// `path` of process pid: through map_files when `range` is one of its mappings of that file and
// map_files may be opened, else through its root.
ForeignFile open_process_file(pid_t pid, const std::string& path, uint64_t max_bytes,
                              const std::optional<MappedRange>& range = std::nullopt);

// A unix socket of process pid at `path`, resolved inside its root like a file above and checked to
// be a socket: an O_PATH descriptor to connect to as /proc/self/fd/N. Invalid, and why in *error,
// otherwise (a symlink to a host socket stays inside the root, where it names nothing).
FileFd open_process_socket(pid_t pid, const std::string& path, std::string* error);
// The same inside the directory root_fd as if it were "/".
FileFd open_socket_in_root(int root_fd, const std::string& path, std::string* error);

// When such a file was last changed and made (statx(2), CLOCK_REALTIME seconds; a rename moves the
// change time; birth_s 0 where its filesystem keeps no birth time: ext4 with 128-byte inodes, 9p,
// NFS), and its first head_bytes bytes (fewer in a smaller file), from one open of it. nullopt, and
// why in *error, where it cannot be opened or read.
struct FileTimes {
  double birth_s = 0, change_s = 0;
  std::string head;
};
std::optional<FileTimes> process_file_times(pid_t pid, const std::string& path, size_t head_bytes,
                                            std::string* error = nullptr);

// The whole content of such a file (at most max_bytes, else nullopt with `error` set).
std::optional<std::string> read_process_file(pid_t pid, const std::string& path, uint64_t max_bytes,
                                             std::string* error = nullptr);

}  // namespace thptrace::proc
