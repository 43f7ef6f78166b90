// SPDX-License-Identifier: Apache-2.0
// --redis-auth MATCH=PATH: rules parsed with one sentence for each mistake, their files read as a
// Kubernetes basic-auth Secret is mounted (keys as symbolic links into a ..data directory) or as a
// password file, and the first rule matching a target's label or its NAMESPACE/POD chosen.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/credential_rules.h"

using namespace thptrace::daemon;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "thptrace-rules-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// A Secret as the kubelet mounts it: ..2026_12_03_12_00_00.1/{username,password}, ..data pointing
// at it, and each key a link through ..data.
fs::path mounted_secret(const fs::path& root, const std::string& user, const std::string& password) {
  fs::path dir = root / "secret";
  fs::create_directories(dir / "..2026_12_03_12_00_00.1");
  write(dir / "..2026_12_03_12_00_00.1/password", password);
  if (!user.empty()) write(dir / "..2026_12_03_12_00_00.1/username", user);
  fs::create_directory_symlink("..2026_12_03_12_00_00.1", dir / "..data");
  fs::create_symlink("..data/password", dir / "password");
  if (!user.empty()) fs::create_symlink("..data/username", dir / "username");
  return dir;
}

}  // namespace

TEST(CredentialRules, ParseSaysWhatIsWrongInOneSentence) {
  std::string error;
  const auto r = parse_credential_rule("shop/cache-*=/etc/thptrace/auth/shop", &error);
  ASSERT_TRUE(r) << error;
  EXPECT_EQ(r->match, "shop/cache-*");
  EXPECT_EQ(r->path, "/etc/thptrace/auth/shop");
  // A path may hold '=': the rule splits at the first one.
  EXPECT_EQ(parse_credential_rule("10.0.0.*:6379=/run/a=b", &error)->path, "/run/a=b");
  for (const char* bad : {"shop/cache-0", "=/etc/x", "shop/*=", "shop/*=relative/path"}) {
    error.clear();
    EXPECT_FALSE(parse_credential_rule(bad, &error)) << bad;
    EXPECT_EQ(error.rfind(std::string("--redis-auth ") + bad + ": expected", 0), 0u) << error;
    EXPECT_EQ(std::count(error.begin(), error.end(), '.'), std::count(error.begin(), error.end(), '.'));
    EXPECT_EQ(error.find('\n'), std::string::npos);
  }
}

TEST(CredentialRules, ReadsAMountedSecretOrAPasswordFile) {
  TempDir tmp;
  const fs::path secret = mounted_secret(tmp.path, "thptrace\n", "s3cret-for-shop\r\n");
  const fs::path bare = mounted_secret(tmp.path / "bare", "", "only-a-password");
  write(tmp.path / "password", "from-a-file\nsecond line ignored\n");
  std::string error;
  const auto rules = load_credential_rules(
      {{"shop/*", secret.string()}, {"unix:/run/*", bare.string()}, {"10.*", (tmp.path / "password").string()}},
      "default-user", &error);
  ASSERT_TRUE(rules) << error;
  ASSERT_EQ(rules->size(), 3u);
  EXPECT_EQ((*rules)[0].login, (Login{"thptrace", "s3cret-for-shop"}));
  // Without `username` in the directory, and for a password file: the daemon's --redis-user.
  EXPECT_EQ((*rules)[1].login, (Login{"default-user", "only-a-password"}));
  EXPECT_EQ((*rules)[2].login, (Login{"default-user", "from-a-file"}));
}

TEST(CredentialRules, UnreadableOrEmptyFilesNameTheRuleAndNeverTheSecret) {
  TempDir tmp;
  write(tmp.path / "empty", "\n");
  fs::create_directory(tmp.path / "no-password");
  write(tmp.path / "no-password/username", "some-user");
  write(tmp.path / "leaky", "line-one");
  struct Case {
    CredentialRule rule;
    std::string says;
  };
  for (const auto& c : std::vector<Case>{
           {{"a", (tmp.path / "missing").string()}, "no such file or directory."},
           {{"b", (tmp.path / "empty").string()}, "its password is empty."},
           {{"c", (tmp.path / "no-password").string()}, "cannot read its password file"},
       }) {
    std::string error;
    EXPECT_FALSE(load_credential_rules({{"ok", (tmp.path / "leaky").string()}, c.rule}, "", &error)) << c.says;
    EXPECT_EQ(error.rfind("--redis-auth " + c.rule.match + "=" + c.rule.path + ": " + c.says, 0), 0u) << error;
    EXPECT_EQ(error.find("some-user"), std::string::npos) << error;
    EXPECT_EQ(error.find("line-one"), std::string::npos) << error;
  }
}

TEST(CredentialRules, FirstRuleMatchingTheLabelOrThePodWins) {
  const std::vector<LoadedRule> rules = {
      {"shop/cache-0", {"u0", "p0"}},
      {"shop/*", {"u1", "p1"}},
      {"10.0.0.[0-9]:6379", {"", "p2"}},
      {"unix:/run/redis/*.sock", {"", "p3"}},
  };
  const thptrace::proc::ContainerNames cache0{.id = "x", .ns = "shop", .pod = "cache-0", .container = "redis"};
  const thptrace::proc::ContainerNames cache1{.id = "y", .ns = "shop", .pod = "cache-1", .container = "redis"};
  const thptrace::proc::ContainerNames podman{.id = "z", .ns = "", .pod = "", .container = "shop"};
  EXPECT_EQ(match_rule(rules, "127.0.0.1:6379@shop/cache-0", cache0).index, 0);
  EXPECT_TRUE(match_rule(rules, "127.0.0.1:6379@shop/cache-0", cache0).by_pod);
  EXPECT_EQ(match_rule(rules, "127.0.0.1:6379@shop/cache-1", cache1).index, 1);
  // A pod's own address matches an address rule too, but an earlier pod rule comes first.
  EXPECT_EQ(match_rule(rules, "10.0.0.7:6379", cache1).index, 1);
  EXPECT_EQ(match_rule(rules, "10.0.0.7:6379", {}).index, 2);
  EXPECT_FALSE(match_rule(rules, "10.0.0.7:6379", {}).by_pod);
  EXPECT_EQ(match_rule(rules, "10.0.0.17:6379", {}).index, -1);
  EXPECT_EQ(match_rule(rules, "unix:/run/redis/a.sock", {}).index, 3);
  // A container without Kubernetes names has no NAMESPACE/POD: its runtime name is not a pod.
  EXPECT_EQ(match_rule(rules, "127.0.0.1:6379@shop", podman).index, -1);
  EXPECT_EQ(match_rule({}, "10.0.0.7:6379", cache0).index, -1);
}
