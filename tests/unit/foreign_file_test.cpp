// SPDX-License-Identifier: Apache-2.0
// proc/foreign_file.h against a fake container root made in a temporary directory, and against this
// process's own /proc/PID/root and map_files.
#include "proc/foreign_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "proc/maps.h"
#include "proc/proc.h"

namespace fs = std::filesystem;
using namespace thptrace::proc;

namespace {

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

std::string map_files_link(const MappedRange& r) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "/proc/self/map_files/%lx-%lx", static_cast<unsigned long>(r.start),
                static_cast<unsigned long>(r.end));
  return buf;
}

std::string read_all(const ForeignFile& f) {
  std::string out(f.size, '\0');
  EXPECT_EQ(::pread(f.fd.get(), out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
  return out;
}

// <tmp>/host holds a "host" secret; <tmp>/root is the container's "/", with its own /etc/secret.
class FakeRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/thptrace-foreign.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    root_ = dir_ / "root";
    fs::create_directories(root_ / "etc");
    fs::create_directories(root_ / "lib");
    fs::create_directories(dir_ / "host");
    write(dir_ / "host" / "shadow", "host secret");
    write(root_ / "etc" / "shadow", "container file");
    write(root_ / "lib" / "libc.so.6", "container libc");
    root_fd_ = FileFd(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_fd_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ForeignFile open(const std::string& path, uint64_t max = kMaxTextBytes) {
    return open_in_root(root_fd_.get(), path, max);
  }

  fs::path dir_, root_;
  FileFd root_fd_;
};

}  // namespace

TEST_F(FakeRoot, ANormalFileIsRead) {
  const auto f = open("/lib/libc.so.6");
  ASSERT_TRUE(f.fd) << f.error;
  EXPECT_EQ(read_all(f), "container libc");
  // The descriptor is for reading only, non-blocking and closed on exec.
  const int fl = ::fcntl(f.fd.get(), F_GETFL);
  EXPECT_EQ(fl & O_ACCMODE, O_RDONLY);
  EXPECT_TRUE(fl & O_NONBLOCK);
  EXPECT_TRUE(::fcntl(f.fd.get(), F_GETFD) & FD_CLOEXEC);
}

TEST_F(FakeRoot, AnAbsoluteSymlinkToAHostFileStaysInsideTheRoot) {
  // The host's secret by its absolute host path: inside the root that path does not exist.
  fs::create_symlink(dir_ / "host" / "shadow", root_ / "lib" / "escape");
  const auto escaped = open("/lib/escape");
  EXPECT_FALSE(escaped.fd);
  EXPECT_FALSE(escaped.error.empty());
  // "/etc/shadow" from the container's symlink is the container's own.
  fs::create_symlink("/etc/shadow", root_ / "lib" / "inside");
  const auto inside = open("/lib/inside");
  ASSERT_TRUE(inside.fd) << inside.error;
  EXPECT_EQ(read_all(inside), "container file");
  // ".." past the root stops at the root, in a symlink as in the path.
  fs::create_symlink("../../../../host/shadow", root_ / "lib" / "up");
  EXPECT_FALSE(open("/lib/up").fd);
  const auto dotdot = open("/../../etc/shadow");
  ASSERT_TRUE(dotdot.fd) << dotdot.error;
  EXPECT_EQ(read_all(dotdot), "container file");
}

TEST_F(FakeRoot, AFifoIsRefusedWithoutBlocking) {
  // Nothing ever opens the other end: an open for reading that waited for a writer would hang here.
  ASSERT_EQ(::mkfifo((root_ / "lib" / "fifo").c_str(), 0600), 0);
  const auto f = open("/lib/fifo");
  EXPECT_FALSE(f.fd);
  EXPECT_EQ(f.error, "not a regular file");
  fs::create_symlink("/lib/fifo", root_ / "lib" / "to-fifo");
  EXPECT_EQ(open("/lib/to-fifo").error, "not a regular file");
}

TEST_F(FakeRoot, ADirectoryAndADeviceAreRefused) {
  EXPECT_EQ(open("/etc").error, "not a regular file");
  // A symlink to a host device inside the root is the root's path, absent; the host's /dev/null by
  // the host's root is a device, refused before it is opened for reading.
  fs::create_symlink("/dev/null", root_ / "lib" / "null");
  EXPECT_FALSE(open("/lib/null").fd);
  const FileFd host(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  EXPECT_EQ(open_in_root(host.get(), "/dev/null", kMaxTextBytes).error, "not a regular file");
}

TEST_F(FakeRoot, ATooLargeFileIsRefused) {
  // Sparse: 2 GiB of size, no blocks.
  const auto big = root_ / "lib" / "huge.so";
  write(big, "");
  fs::resize_file(big, (uint64_t{2} << 30));
  const auto f = open("/lib/huge.so", kMaxElfBytes);
  EXPECT_FALSE(f.fd);
  EXPECT_NE(f.error.find("more than"), std::string::npos) << f.error;
  // Exactly at the limit is fine.
  write(root_ / "lib" / "four", "four");
  EXPECT_TRUE(open("/lib/four", 4).fd);
  EXPECT_FALSE(open("/lib/four", 3).fd);
}

// A unix socket listening at `path`; its descriptor (closed by the caller's FileFd).
FileFd listen_unix(const fs::path& path) {
  FileFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa), 0) << path;
  EXPECT_EQ(::listen(fd.get(), 4), 0);
  return fd;
}

// A container's Redis socket is reached inside the container: its own socket is, a symlink there to a
// host socket is not (it would be reached with the daemon's privileges and sent the password), nor a
// file that is not a socket.
TEST_F(FakeRoot, ASocketIsOpenedInsideTheRootOnly) {
  fs::create_directories(root_ / "run");
  const FileFd own = listen_unix(root_ / "run" / "redis.sock");
  const FileFd host = listen_unix(dir_ / "host" / "host.sock");
  fs::create_symlink(dir_ / "host" / "host.sock", root_ / "run" / "link.sock");
  std::string error;
  const FileFd found = open_socket_in_root(root_fd_.get(), "/run/redis.sock", &error);
  ASSERT_TRUE(found) << error;
  // Reached through our own fd link, as the transport does.
  FileFd client(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d", found.get());
  EXPECT_EQ(::connect(client.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa), 0) << std::strerror(errno);
  EXPECT_FALSE(open_socket_in_root(root_fd_.get(), "/run/link.sock", &error));
  EXPECT_FALSE(error.empty());
  EXPECT_FALSE(open_socket_in_root(root_fd_.get(), "/etc/shadow", &error));
  EXPECT_EQ(error, "not a socket");
}

TEST(ForeignFile, AMagicLinkIsNotFollowed) {
  // /proc/self/root is a magic link: inside a container's tree such a link would lead to the host.
  const FileFd host(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  const auto f = open_in_root(host.get(), "/proc/self/root/etc/hostname", kMaxTextBytes);
  EXPECT_FALSE(f.fd);
  EXPECT_FALSE(f.error.empty());
}

TEST(ForeignFile, AFileOfThisProcessThroughItsRootAndItsMapping) {
  char tmpl[] = "/tmp/thptrace-mapped.XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  const std::string path = tmpl;
  ASSERT_EQ(::write(fd, "mapped!!", 8), 8);
  void* map = ::mmap(nullptr, 8, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  ::close(fd);
  // Through /proc/PID/root: the file at the path.
  std::string error;
  EXPECT_EQ(read_process_file(::getpid(), path, kMaxTextBytes, &error).value_or(error), "mapped!!");

  // Another file takes the path; the mapping keeps the first.
  const auto maps = parse_maps(read_file("/proc/self/maps", 16 << 20).value_or(""));
  std::optional<MappedRange> range;
  for (const auto& m : maps)
    if (m.start == reinterpret_cast<uint64_t>(map)) range = m.range();
  ASSERT_TRUE(range);
  write(path + ".new", "the path");
  fs::rename(path + ".new", path);
  const auto f = open_process_file(::getpid(), path, kMaxTextBytes, range);
  ASSERT_TRUE(f.fd) << f.error;
  // map_files opens with CAP_SYS_ADMIN (root): the mapped file; without, the walk finds the path's.
  const bool map_files = FileFd(::open(map_files_link(*range).c_str(), O_PATH | O_CLOEXEC)).get() >= 0;
  EXPECT_EQ(read_all(f), map_files ? "mapped!!" : "the path");
  ::munmap(map, 8);
  fs::remove(path);
}
