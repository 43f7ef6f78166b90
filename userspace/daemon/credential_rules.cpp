// SPDX-License-Identifier: Apache-2.0
#include "daemon/credential_rules.h"

#include <fnmatch.h>
#include <sys/stat.h>

#include "common/log.h"
#include "proc/proc.h"
#include "redis/tls.h"

namespace thptrace::daemon {

namespace {

// The first line of a credentials file, at most 4 KiB of it, without its line end.
std::optional<std::string> first_line(const std::string& path) {
  auto text = proc::read_file(path, 4096);
  if (!text) return std::nullopt;
  std::string line = text->substr(0, text->find('\n'));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

}  // namespace

std::optional<CredentialRule> parse_credential_rule(const std::string& text, std::string* error) {
  const auto eq = text.find('=');
  const auto fail = [&](const std::string& why) {
    if (error) *error = "--redis-auth " + text + ": " + why;
    return std::nullopt;
  };
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return fail("expected MATCH=PATH (a target label or NAMESPACE/POD glob, then a file or directory).");
  CredentialRule r{text.substr(0, eq), text.substr(eq + 1)};
  if (r.path.front() != '/') return fail("expected an absolute path after '='.");
  return r;
}

std::optional<std::vector<LoadedRule>> load_credential_rules(const std::vector<CredentialRule>& rules,
                                                             const std::string& default_user, std::string* error) {
  std::vector<LoadedRule> loaded;
  for (const auto& rule : rules) {
    const auto fail = [&](const std::string& why) {
      if (error) *error = "--redis-auth " + rule.match + "=" + rule.path + ": " + why;
      return std::nullopt;
    };
    struct stat st {};
    if (::stat(rule.path.c_str(), &st) != 0) return fail("no such file or directory.");
    LoadedRule r{rule.match, {default_user, {}}};
    if (S_ISDIR(st.st_mode)) {
      // A mounted Secret: its keys are files (symbolic links into a ..data directory).
      auto password = first_line(rule.path + "/password");
      if (!password)
        return fail("cannot read its password file (the directory holds `password` and, optionally, `username`).");
      r.login.password = std::move(*password);
      if (::access((rule.path + "/username").c_str(), F_OK) == 0) {
        auto user = first_line(rule.path + "/username");
        if (!user) return fail("cannot read its username file.");
        r.login.user = std::move(*user);
      }
    } else {
      auto password = first_line(rule.path);
      if (!password) return fail("cannot read it.");
      r.login.password = std::move(*password);
    }
    if (r.login.password.empty()) return fail("its password is empty.");
    loaded.push_back(std::move(r));
  }
  return loaded;
}

RuleMatch match_rule(const std::vector<LoadedRule>& rules, const std::string& label,
                     const proc::ContainerNames& names) {
  const std::string pod = names.ns.empty() || names.pod.empty() ? std::string() : names.ns + "/" + names.pod;
  for (size_t i = 0; i < rules.size(); ++i) {
    const char* glob = rules[i].match.c_str();
    if (!pod.empty() && ::fnmatch(glob, pod.c_str(), 0) == 0) return {static_cast<int>(i), true};
    if (::fnmatch(glob, label.c_str(), 0) == 0) return {static_cast<int>(i), false};
  }
  return {};
}

std::optional<Logins> Logins::load(const redis::ConnectionSettings& settings, const std::vector<CredentialRule>& rules,
                                   bool discover, std::string* error) {
  auto credentials = redis::load_credentials(settings, error);
  if (!credentials) return std::nullopt;
  auto loaded = load_credential_rules(rules, settings.user, error);
  if (!loaded) return std::nullopt;
  Logins out;
  out.default_user_ = settings.user;
  out.credentials_ = std::move(*credentials);
  out.rules_ = std::move(*loaded);
  if (discover) {
    out.discovery_tls_ = out.credentials_.tls;
    // Without --redis-tls a discovered TLS port is still tried, against this system's CAs, so that
    // the reason it cannot be reached (an unknown CA, most likely) is the one reported.
    std::string why;
    if (!out.discovery_tls_) out.discovery_tls_ = redis::TlsContext::create({}, &why);
    if (!out.discovery_tls_) log::debug("discovered TLS ports will not be tried: {}", why);
  }
  return out;
}

Login Logins::of(int rule) const {
  if (rule >= 0) return rules_.at(static_cast<size_t>(rule)).login;
  return {default_user_, credentials_.password};
}

}  // namespace thptrace::daemon
