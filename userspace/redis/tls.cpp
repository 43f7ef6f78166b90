// SPDX-License-Identifier: Apache-2.0
#include "redis/tls.h"

#include "common/text.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>

namespace thptrace::redis {
namespace {

// The first certificate verification failure of one handshake, with what the sentence names:
// OpenSSL's verify result alone says "hostname mismatch", not which names the certificate holds.
struct VerifyRecord {
  bool cert_requested = false;  // the server sent a CertificateRequest
  int error = 0;  // X509_V_ERR_*, 0 while none
  std::string subject_names;
  std::string not_before, not_after;
};

void free_record(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<VerifyRecord*>(ptr); }

int record_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, free_record);
  return index;
}

VerifyRecord* record_of(const SSL* ssl) { return static_cast<VerifyRecord*>(SSL_get_ex_data(ssl, record_index())); }

// The certificate is outside input: keep printable ASCII, and not much of it.
std::string printable(const unsigned char* data, size_t len) {
  return text::ascii_printable(std::string_view(reinterpret_cast<const char*>(data), len), 64);
}

std::string utc(const ASN1_TIME* t) {
  std::tm tm{};
  if (!t || ASN1_TIME_to_tm(t, &tm) != 1) return "an unreadable date";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// "DNS:redis.internal, IP:10.0.0.5" from the subject alternative names, else "CN=...".
std::string names_of(X509* cert) {
  std::string out;
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names) && i < 8; ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    std::string one;
    if (n->type == GEN_DNS) {
      one = "DNS:" + printable(ASN1_STRING_get0_data(n->d.dNSName), ASN1_STRING_length(n->d.dNSName));
    } else if (n->type == GEN_IPADD) {
      const int len = ASN1_STRING_length(n->d.iPAddress);
      char text[INET6_ADDRSTRLEN] = "?";
      if (len == 4 || len == 16) inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(n->d.iPAddress), text, sizeof text);
      one = std::string("IP:") + text;
    }
    if (!one.empty()) out += (out.empty() ? "" : ", ") + one;
  }
  GENERAL_NAMES_free(names);
  if (out.empty()) {
    char cn[256] = "";
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn) > 0)
      out = "CN=" + printable(reinterpret_cast<const unsigned char*>(cn), std::strlen(cn));
  }
  return out.empty() ? "no name" : out;
}

int verify_callback(int ok, X509_STORE_CTX* store) {
  if (ok) return ok;
  auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  VerifyRecord* rec = ssl ? record_of(ssl) : nullptr;
  if (rec && rec->error == 0) {
    rec->error = X509_STORE_CTX_get_error(store);
    if (X509* cert = X509_STORE_CTX_get_current_cert(store)) {
      rec->subject_names = names_of(cert);
      rec->not_before = utc(X509_get0_notBefore(cert));
      rec->not_after = utc(X509_get0_notAfter(cert));
    }
  }
  return ok;
}

// Notes a CertificateRequest from the server. Under TLS 1.3 a server that wants a client certificate
// and gets none (or one it refuses) says so only after our side of the handshake is done, and a
// server that closes at once may reset the connection before its alert is read: knowing it asked
// is what lets the failure be named.
void message_callback(int write_p, int, int content_type, const void* buf, size_t len, SSL* ssl, void*) {
  if (write_p || content_type != SSL3_RT_HANDSHAKE || len < 1) return;
  if (static_cast<const unsigned char*>(buf)[0] != SSL3_MT_CERTIFICATE_REQUEST) return;
  if (VerifyRecord* rec = record_of(ssl)) rec->cert_requested = true;
}

// OpenSSL's reason for the last error on this thread, e.g. "wrong version number".
std::string openssl_reason(unsigned long err) {
  const char* r = err ? ERR_reason_error_string(err) : nullptr;
  return r ? r : "no reason given";
}

std::string verify_sentence(const VerifyRecord& rec, const std::string& where, const std::string& name) {
  const std::string cert = "the certificate of Redis at " + where;
  switch (rec.error) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_CERT_UNTRUSTED:
      return cert + " is signed by an unknown CA (" + X509_verify_cert_error_string(rec.error) +
             "): give the CA that signed it with --redis-cacert or --redis-capath.";
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return cert + " is not issued for " + name + " (it names " + rec.subject_names +
             "): connect by one of those names or give --redis-tls-server-name.";
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return cert + " (" + rec.subject_names + ") expired on " + rec.not_after +
             ": the server needs a renewed certificate (or this host's clock is wrong).";
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return cert + " (" + rec.subject_names + ") is not valid before " + rec.not_before +
             ": check the clocks of this host and of the CA.";
    default:
      return cert + " failed verification: " + X509_verify_cert_error_string(rec.error) + ".";
  }
}

}  // namespace

std::shared_ptr<const TlsContext> TlsContext::create(const TlsOptions& o, std::string* error) {
  const auto fail = [&](const std::string& sentence) {
    ERR_clear_error();
    if (error) *error = sentence;
    return std::shared_ptr<const TlsContext>();
  };
  if (o.cert.empty() != o.key.empty())
    return fail("--redis-cert and --redis-key go together: give both or neither.");
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) return fail("OpenSSL cannot make a TLS context: " + openssl_reason(ERR_peek_last_error()) + ".");
  std::shared_ptr<const TlsContext> owner(new TlsContext(ctx, o));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // An encrypted key would make OpenSSL ask for its pass phrase on the terminal: refuse instead.
  SSL_CTX_set_default_passwd_cb(ctx, [](char*, int, int, void*) { return 0; });
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_callback);
  SSL_CTX_set_msg_callback(ctx, message_callback);
  if (o.cacert.empty() && o.capath.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx) != 1)
      return fail("cannot read this system's CA certificates: give --redis-cacert or --redis-capath.");
  } else if (SSL_CTX_load_verify_locations(ctx, o.cacert.empty() ? nullptr : o.cacert.c_str(),
                                           o.capath.empty() ? nullptr : o.capath.c_str()) != 1) {
    const std::string which = o.cacert.empty() ? "--redis-capath " + o.capath : "--redis-cacert " + o.cacert;
    return fail("cannot read the CA certificates of " + which + " (" + openssl_reason(ERR_peek_last_error()) +
                "): expected PEM certificates" + (o.cacert.empty() ? " in a c_rehash'ed directory." : "."));
  }
  if (!o.cert.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, o.cert.c_str()) != 1)
      return fail("cannot read the client certificate --redis-cert " + o.cert + " (" +
                  openssl_reason(ERR_peek_last_error()) + "): expected a PEM certificate.");
    // The key's path may be named, never its content or OpenSSL's view of it beyond a reason.
    if (SSL_CTX_use_PrivateKey_file(ctx, o.key.c_str(), SSL_FILETYPE_PEM) != 1) {
      if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
        return fail("the key --redis-key " + o.key + " does not belong to the certificate --redis-cert " + o.cert + ".");
      return fail("cannot read the private key --redis-key " + o.key + " (" + openssl_reason(ERR_peek_last_error()) +
                  "): expected an unencrypted PEM key.");
    }
    if (SSL_CTX_check_private_key(ctx) != 1)
      return fail("the key --redis-key " + o.key + " does not belong to the certificate --redis-cert " + o.cert + ".");
  }
  ERR_clear_error();
  return owner;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

bool tls_prepare(SSL* ssl, const std::string& name) {
  if (SSL_set_ex_data(ssl, record_index(), new VerifyRecord) != 1) return false;
  unsigned char ip[16];
  const bool is_ip = inet_pton(AF_INET, name.c_str(), ip) == 1 || inet_pton(AF_INET6, name.c_str(), ip) == 1;
  if (is_ip) return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) == 1;
  // SSL_set1_host checks the DNS names (or, without any, the CN) of the server's certificate.
  return SSL_set_tlsext_host_name(ssl, name.c_str()) == 1 && SSL_set1_host(ssl, name.c_str()) == 1;
}

void tls_answered(SSL* ssl) {
  if (VerifyRecord* rec = record_of(ssl)) rec->cert_requested = false;
}

std::string tls_failure(SSL* ssl, int ret, int code, const std::string& where, const std::string& name) {
  const unsigned long err = ERR_peek_last_error();
  ERR_clear_error();
  const VerifyRecord* rec = record_of(ssl);
  if (code == SSL_ERROR_SSL && rec && rec->error != 0) return verify_sentence(*rec, where, name);
  const std::string at = "Redis at " + where;
  // Closed or reset right after it asked for our certificate: that certificate is the reason.
  const bool closed = code == SSL_ERROR_ZERO_RETURN || code == SSL_ERROR_SYSCALL ||
                      (code == SSL_ERROR_SSL && ERR_GET_REASON(err) == SSL_R_UNEXPECTED_EOF_WHILE_READING);
  if (closed && rec && rec->cert_requested) {
    if (!SSL_get_certificate(ssl))
      return at + " requires a client certificate (tls-auth-clients): give --redis-cert and --redis-key.";
    return at + " refused our client certificate (it closed the connection): --redis-cert must be signed by a "
                "CA of its tls-ca-cert-file.";
  }
  if (code == SSL_ERROR_SSL && ERR_GET_LIB(err) == ERR_LIB_SSL) {
    switch (ERR_GET_REASON(err)) {
      case SSL_R_WRONG_VERSION_NUMBER:
      case SSL_R_PACKET_LENGTH_TOO_LONG:
      case SSL_R_UNKNOWN_PROTOCOL:
      case SSL_R_HTTP_REQUEST:
        return at + " does not speak TLS (OpenSSL: " + openssl_reason(err) +
               "): give the address of its tls-port, or drop --redis-tls for its plain port.";
      case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
        return at + " requires a client certificate (tls-auth-clients): give --redis-cert and --redis-key.";
      case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
      case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
      case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
      case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
        return at + " refused our client certificate (OpenSSL: " + openssl_reason(err) +
               "): --redis-cert must be signed by a CA of its tls-ca-cert-file.";
      case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
        return at + " refused the TLS handshake (OpenSSL: " + openssl_reason(err) +
               "): it may require a client certificate (--redis-cert, --redis-key).";
      case SSL_R_UNEXPECTED_EOF_WHILE_READING:
        return at + " closed the connection during TLS: is that its tls-port, and does it want a client "
                    "certificate (--redis-cert, --redis-key)?";
      default:
        break;
    }
  }
  if (code == SSL_ERROR_ZERO_RETURN || (code == SSL_ERROR_SYSCALL && ret == 0))
    return at + " closed the TLS connection.";
  if (code == SSL_ERROR_SYSCALL && errno != 0) return "TLS with " + at + " failed: " + std::strerror(errno) + ".";
  return "TLS with " + at + " failed (OpenSSL: " + openssl_reason(err) + ").";
}

}  // namespace thptrace::redis
