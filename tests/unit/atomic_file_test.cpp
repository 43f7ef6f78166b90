// SPDX-License-Identifier: Apache-2.0
// Report files written all or nothing (common/atomic_file.h): the content lands whole, a symlink at
// the target is replaced rather than followed, and a failed write leaves neither a temporary file
// nor a changed target.
#include "common/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace thptrace {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "thptrace-atomic-XXXXXX").string();
    EXPECT_NE(::mkdtemp(t.data()), nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    return out;
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs f in a child process and returns its exit status: a failure the test needs (a file size
// limit, another user's rights) without changing this process.
template <typename F>
int in_child(F f) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(f());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(AtomicFile, WritesTheWholeContentWithMode0644AndNothingElse) {
  TempDir d;
  const auto target = d.path / "report.json";
  std::ofstream(target) << "old";
  const std::string content(3 << 20, 'x');  // several write() calls' worth
  const mode_t old_mask = ::umask(022);
  std::string error;
  EXPECT_TRUE(write_file_atomically(target.string(), content, &error)) << error;
  ::umask(old_mask);
  EXPECT_EQ(slurp(target), content);
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_EQ(d.entries(), std::vector<std::string>{"report.json"});
}

TEST(AtomicFile, ARelativePathLandsInTheCurrentDirectory) {
  TempDir d;
  const auto cwd = fs::current_path();
  fs::current_path(d.path);
  std::string error;
  EXPECT_TRUE(write_file_atomically("t.svg", "<svg/>", &error)) << error;
  fs::current_path(cwd);
  EXPECT_EQ(slurp(d.path / "t.svg"), "<svg/>");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"t.svg"});
}

TEST(AtomicFile, ASymlinkAtTheTargetIsReplacedNotFollowed) {
  TempDir d, elsewhere;
  const auto victim = elsewhere.path / "passwd";
  std::ofstream(victim) << "root:x:0:0";
  const auto target = d.path / "report.json";
  fs::create_symlink(victim, target);
  std::string error;
  ASSERT_TRUE(write_file_atomically(target.string(), "{}\n", &error)) << error;
  EXPECT_FALSE(fs::is_symlink(target));
  EXPECT_EQ(slurp(target), "{}\n");
  EXPECT_EQ(slurp(victim), "root:x:0:0");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"report.json"});
}

TEST(AtomicFile, AnUnwritableDirectoryIsAnErrorAndLeavesNoTemporary) {
  TempDir d;
  const auto target = d.path / "report.json";
  std::ofstream(target) << "old";
  fs::permissions(d.path, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                              fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  // Root writes anywhere: the write is tried as nobody, for whom the mode bits hold.
  const int rc = in_child([&] {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 3;
    std::string error;
    if (write_file_atomically(target.string(), "new", &error)) return 0;
    return error.find("Permission denied") != std::string::npos ? 1 : 2;
  });
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(slurp(target), "old");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"report.json"});
  std::string error;
  EXPECT_FALSE(write_file_atomically((d.path / "no-such-dir" / "r.json").string(), "x", &error));
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;
}

TEST(AtomicFile, AWriteThatFailsHalfwayLeavesTheOldFileAndNoTemporary) {
  TempDir d;
  const auto target = d.path / "report.json";
  std::ofstream(target) << "old";
  // A file size limit stands in for a full disk: write() fails with EFBIG after 4 KiB.
  const int rc = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit small{4096, 4096};
    if (::setrlimit(RLIMIT_FSIZE, &small) != 0) return 3;
    std::string error;
    if (write_file_atomically(target.string(), std::string(1 << 20, 'y'), &error)) return 0;
    return error.find("File too large") != std::string::npos ? 1 : 2;
  });
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(slurp(target), "old");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"report.json"});
}

TEST(AtomicFile, ATargetThatIsADirectoryIsAnError) {
  TempDir d;
  fs::create_directory(d.path / "out");
  std::string error;
  EXPECT_FALSE(write_file_atomically((d.path / "out").string(), "x", &error));
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(d.entries(), std::vector<std::string>{"out"});
}

}  // namespace
}  // namespace thptrace
