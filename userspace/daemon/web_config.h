// SPDX-License-Identifier: Apache-2.0
#pragma once
// The web configuration file Prometheus exporters share (the exporter toolkit's web-config.yml, read
// by node_exporter and others with --web.config.file). thptrace serves its basic_auth_users: the
// users /metrics admits, each with a bcrypt hash of their password. Its tls_server_config is refused:
// Debian 12's civetweb (1.15, loading OpenSSL 3 at run time) crashes on the first TLS connection,
// its own civetweb binary too, so TLS is terminated in front of the endpoint (docs/guide/daemon.md).

#include <map>
#include <optional>
#include <string>

namespace thptrace::daemon {

struct WebConfig {
  std::map<std::string, std::string> basic_auth_users;  // user: bcrypt hash
};

// Parses the file's text. nullopt with *error set to one sentence when it is not a web
// configuration thptrace can serve.
std::optional<WebConfig> parse_web_config(const std::string& text, std::string* error);

// Reads path (at most 1 MiB) and parses it. Throws FatalError(kExitUsage) with one sentence.
WebConfig load_web_config(const std::string& path);

// Whether password is the one the bcrypt hash ($2a$, $2b$, $2y$) was made from. For an unknown
// user pass "": the time taken is the same, so it does not tell which users exist.
bool bcrypt_matches(const std::string& password, const std::string& hash);

}  // namespace thptrace::daemon
