// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the command line or the config file says about reaching Redis besides its address, and the
// credentials made from it: the password read from its file and the TLS context built from the CA,
// certificate and key files. Shared by the capture and the daemon (which loads them again on SIGHUP).

#include <memory>
#include <optional>
#include <string>

#include "redis/address.h"
#include "redis/tls.h"

namespace thptrace::redis {

struct ConnectionSettings {
  std::string user;           // --redis-user
  std::string password_file;  // --redis-password-file
  bool tls = false;           // --redis-tls
  TlsOptions tls_options;     // --redis-cacert, --redis-capath, --redis-cert, --redis-key, --redis-tls-server-name
};

struct Credentials {
  std::string password;
  std::shared_ptr<const TlsContext> tls;  // null without --redis-tls
};

// One sentence when the settings contradict themselves (a TLS file without --redis-tls, a key
// without a certificate); "" when they are fine.
std::string check_settings(const ConnectionSettings& settings);

// Reads the password file and the TLS files, once. nullopt and one sentence in *error when one is
// unreadable or wrong; nothing read from them is ever put in a message.
std::optional<Credentials> load_credentials(const ConnectionSettings& settings, std::string* error);

// The TLS context for one address: none for a unix socket (Redis serves no TLS there).
inline std::shared_ptr<const TlsContext> tls_for(const Credentials& c, const Address& a) {
  return a.is_unix() ? nullptr : c.tls;
}

}  // namespace thptrace::redis
