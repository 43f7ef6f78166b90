// SPDX-License-Identifier: Apache-2.0
#include "daemon/web_config.h"

#include <crypt.h>
#include <yaml-cpp/yaml.h>

#include <cstring>
#include <memory>
#include <stdexcept>

#include "common/error.h"
#include "proc/proc.h"

namespace thptrace::daemon {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;
constexpr size_t kMaxUsers = 1024;
constexpr size_t kMaxField = 4096;

// A bcrypt hash of a password nobody has, compared against when the user is unknown.
constexpr const char* kNobody = "$2b$10$5m6VvzfJgrV0xgHfZc0ZRu2v4X2Jq8Qxq1Z5nR1p5o6w7y8z9A0Bq";

bool is_bcrypt(const std::string& h) {
  return h.size() == 60 && (h.rfind("$2a$", 0) == 0 || h.rfind("$2b$", 0) == 0 || h.rfind("$2y$", 0) == 0);
}

std::string scalar(const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) throw std::runtime_error(where + " is not a string");
  std::string s = n.as<std::string>();
  if (s.size() > kMaxField) throw std::runtime_error(where + " is longer than 4096 bytes");
  return s;
}

std::map<std::string, std::string> parse_users(const YAML::Node& n) {
  if (!n.IsMap()) throw std::runtime_error("basic_auth_users is not a mapping of user: bcrypt hash");
  std::map<std::string, std::string> users;
  for (const auto& kv : n) {
    const std::string user = scalar(kv.first, "a basic_auth_users name");
    if (user.empty() || user.find(':') != std::string::npos)
      throw std::runtime_error("a basic_auth_users name is empty or holds ':'");
    const std::string hash = scalar(kv.second, "basic_auth_users." + user);
    if (!is_bcrypt(hash))
      throw std::runtime_error("basic_auth_users." + user + " is not a bcrypt hash ($2b$..., 60 characters)");
    if (users.size() >= kMaxUsers) throw std::runtime_error("basic_auth_users has more than 1024 users");
    users[user] = hash;
  }
  return users;
}

}  // namespace

std::optional<WebConfig> parse_web_config(const std::string& text, std::string* error) {
  try {
    const YAML::Node root = YAML::Load(text);
    WebConfig c;
    if (root.IsNull()) return c;
    if (!root.IsMap()) throw std::runtime_error("the file is not a YAML mapping");
    for (const auto& kv : root) {
      const std::string key = scalar(kv.first, "a top-level key");
      if (kv.second.IsNull()) continue;
      if (key == "basic_auth_users")
        c.basic_auth_users = parse_users(kv.second);
      else if (key == "tls_server_config")
        throw std::runtime_error(
            "tls_server_config is not served: Debian 12's civetweb crashes on TLS connections, so terminate TLS in "
            "front of the endpoint (docs/guide/daemon.md)");
      else
        throw std::runtime_error(key + " is not supported by thptrace (it reads basic_auth_users)");
    }
    return c;
  } catch (const YAML::Exception& e) {
    *error = std::string("not valid YAML (") + e.what() + ")";
  } catch (const std::exception& e) {
    *error = e.what();
  }
  return std::nullopt;
}

WebConfig load_web_config(const std::string& path) {
  const auto text = proc::read_file(path, kMaxFileBytes);
  if (!text) throw FatalError(kExitUsage, "--web.config.file " + path + ": cannot read it.");
  std::string error;
  auto c = parse_web_config(*text, &error);
  if (!c) throw FatalError(kExitUsage, "--web.config.file " + path + ": " + error + ".");
  return *c;
}

bool bcrypt_matches(const std::string& password, const std::string& hash) {
  if (password.find('\0') != std::string::npos) return false;  // crypt(3) would stop at it
  const std::string setting = is_bcrypt(hash) ? hash : std::string(kNobody);
  auto data = std::make_unique<crypt_data>();  // 32 KiB: not on a worker's stack
  const char* out = crypt_r(password.c_str(), setting.c_str(), data.get());
  if (!out || std::strlen(out) != setting.size()) return false;
  unsigned char diff = 0;  // compared in constant time
  for (size_t i = 0; i < setting.size(); ++i) diff |= static_cast<unsigned char>(out[i] ^ setting[i]);
  return diff == 0 && is_bcrypt(hash);
}

}  // namespace thptrace::daemon
