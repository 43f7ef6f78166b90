// SPDX-License-Identifier: Apache-2.0
#pragma once
// --redis-auth MATCH=PATH: credentials per target in one daemon. A fleet's Redis rarely share one
// password; a DaemonSet per group would discover every Redis twice. Each rule names the targets it
// is for and where their credentials are; the first rule that matches a target gives its login,
// and a target no rule matches uses --redis-user/--redis-password-file.
//
// MATCH is a glob (fnmatch: *, ?, [...]) tried on the target's label ("10.0.0.7:6379",
// "unix:/run/redis/a.sock", "127.0.0.1:6379@payments/redis-0") and, for a discovered process in a
// Kubernetes pod, on "NAMESPACE/POD" as the container runtime recorded it. PATH is either a
// directory holding `password` and, optionally, `username` (a Secret of type kubernetes.io/basic-auth
// mounted as a volume), or a file whose first line is the password (the user then is --redis-user).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proc/container.h"
#include "redis/credentials.h"

namespace thptrace::daemon {

struct CredentialRule {
  std::string match;
  std::string path;
};

// "MATCH=PATH" split at its first '='; nullopt and one sentence in *error when either side is empty
// or PATH is not absolute.
std::optional<CredentialRule> parse_credential_rule(const std::string& text, std::string* error);

struct Login {
  std::string user;      // "" = Redis's default user (AUTH with the password alone)
  std::string password;  // "" = no AUTH
  bool operator==(const Login&) const = default;
};

struct LoadedRule {
  std::string match;
  Login login;
};

// Reads every rule's files, once (at start and on SIGHUP). default_user is --redis-user, the user of
// a rule whose PATH is a single file. nullopt and one sentence in *error, naming the rule, when a file
// is missing, unreadable or empty; nothing read from them is ever put in a message.
std::optional<std::vector<LoadedRule>> load_credential_rules(const std::vector<CredentialRule>& rules,
                                                             const std::string& default_user, std::string* error);

struct RuleMatch {
  int index = -1;       // the first matching rule; -1 when none
  bool by_pod = false;  // it matched the process's NAMESPACE/POD (not only the label)
};

// The rule for a target with this label, in the pod `names` says (empty names: a bare host, or an
// address given with --redis whose process is not known yet).
RuleMatch match_rule(const std::vector<LoadedRule>& rules, const std::string& label, const proc::ContainerNames& names);

// The logins the daemon sends, read at start and again on SIGHUP: --redis-user, --redis-password-file
// and --redis-tls (redis::Credentials), the --redis-auth rules, and the TLS context discovered TLS
// ports are tried with (--redis-tls's, else the system's CAs; with discover).
class Logins {
 public:
  // Reads every file; nullopt and one sentence in *error when one cannot be read.
  static std::optional<Logins> load(const redis::ConnectionSettings& settings, const std::vector<CredentialRule>& rules,
                                    bool discover, std::string* error);

  // The login a target whose rule is `rule` is sent (-1: --redis-user and --redis-password-file).
  Login of(int rule) const;
  // The rule for a target with this label in the pod `names` says (see match_rule).
  RuleMatch match(const std::string& label, const proc::ContainerNames& names) const {
    return match_rule(rules_, label, names);
  }
  // What rule `rule` matches, as given.
  const std::string& rule_text(int rule) const { return rules_.at(static_cast<size_t>(rule)).match; }
  bool has_rules() const { return !rules_.empty(); }
  // --redis-tls's context (null without it), for the addresses given with --redis.
  const redis::Credentials& credentials() const { return credentials_; }
  // The TLS context discovered TLS ports are tried with (null without discover, or when the system's
  // CAs cannot be read).
  const std::shared_ptr<const redis::TlsContext>& discovery_tls() const { return discovery_tls_; }

 private:
  std::string default_user_;
  redis::Credentials credentials_;
  std::vector<LoadedRule> rules_;
  std::shared_ptr<const redis::TlsContext> discovery_tls_;
};

}  // namespace thptrace::daemon
