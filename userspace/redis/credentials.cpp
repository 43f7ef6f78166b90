// SPDX-License-Identifier: Apache-2.0
#include "redis/credentials.h"

#include "redis/client.h"

namespace thptrace::redis {

std::string check_settings(const ConnectionSettings& s) {
  const TlsOptions& t = s.tls_options;
  if (!s.tls) {
    for (const auto& [flag, value] : {std::pair{"--redis-cacert", &t.cacert}, {"--redis-capath", &t.capath},
                                      {"--redis-cert", &t.cert}, {"--redis-key", &t.key},
                                      {"--redis-tls-server-name", &t.server_name}})
      if (!value->empty()) return std::string(flag) + " applies to TLS connections only: add --redis-tls.";
  }
  if (t.cert.empty() != t.key.empty()) return "--redis-cert and --redis-key go together: give both or neither.";
  return {};
}

std::optional<Credentials> load_credentials(const ConnectionSettings& s, std::string* error) {
  Credentials c;
  if (!s.password_file.empty()) {
    auto pw = read_password_file(s.password_file);
    if (!pw) {
      if (error) *error = "cannot read the password file " + s.password_file + ".";
      return std::nullopt;
    }
    c.password = std::move(*pw);
  }
  if (s.tls) {
    c.tls = TlsContext::create(s.tls_options, error);
    if (!c.tls) return std::nullopt;
  }
  return c;
}

}  // namespace thptrace::redis
