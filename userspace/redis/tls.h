// SPDX-License-Identifier: Apache-2.0
#pragma once
// TLS to Redis with Debian's OpenSSL (hiredis 0.14 has none). A TlsContext holds what every
// connection to one server shares: the CAs to trust, our client certificate and key, the name to
// check the server's certificate against. The files are read once, when it is made; to take a
// rotated key, make a new one (the daemon does on SIGHUP). Nothing read from them is ever logged.

#include <memory>
#include <string>

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace thptrace::redis {

struct TlsOptions {
  std::string cacert;       // PEM file of CAs to trust; with capath, both; neither: the system's
  std::string capath;       // directory of hashed CA certificates (c_rehash)
  std::string cert;         // our certificate, for servers with tls-auth-clients yes/optional
  std::string key;          // its private key (unencrypted PEM)
  std::string server_name;  // the name the certificate must hold and SNI sends; "": the address's host
};

class TlsContext {
 public:
  // Reads the files; nullptr and one sentence in *error when one is unreadable or wrong (a usage
  // error: the command line or the config names it).
  static std::shared_ptr<const TlsContext> create(const TlsOptions& options, std::string* error);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  SSL_CTX* ctx() const { return ctx_; }
  const TlsOptions& options() const { return options_; }

 private:
  TlsContext(SSL_CTX* ctx, TlsOptions options) : ctx_(ctx), options_(std::move(options)) {}
  SSL_CTX* ctx_;
  TlsOptions options_;
};

// Prepares ssl to verify the peer as `name` (an IP literal or a DNS name) and sends it as SNI when
// it is a DNS name (RFC 6066 forbids IP literals there). Records the first verification failure
// for tls_failure(). False when OpenSSL refused the name.
bool tls_prepare(SSL* ssl, const std::string& name);

// The server has answered over ssl: a later close or reset is no longer about our certificate.
void tls_answered(SSL* ssl);

// One sentence for a failed TLS call on ssl (ret and SSL_get_error's `code`) with the server at
// `where`: an unknown CA, a name mismatch, an expired or not yet valid certificate, a server that
// does not speak TLS, a refused client certificate, or OpenSSL's own words. Reads and clears this
// thread's OpenSSL error queue.
std::string tls_failure(SSL* ssl, int ret, int code, const std::string& where, const std::string& name);

}  // namespace thptrace::redis
