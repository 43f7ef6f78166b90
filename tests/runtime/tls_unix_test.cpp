// SPDX-License-Identifier: Apache-2.0
// Redis reached the way security-minded deployments configure it: TLS-only (`port 0`, `tls-port`),
// with and without client certificates, and a unix socket only. A CA and certificates are made here
// with the OpenSSL API. Each server gives the capture's four fork reasons from uprobes and a Redis
// section; the daemon reports it up, by --redis and by --discover; each TLS failure gives its
// sentence and exit status.
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.h"
#include "redis/client.h"

using namespace thptrace::test;
using namespace std::chrono_literals;
namespace redis = thptrace::redis;

namespace {

// ---- certificates -------------------------------------------------------------------------------

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
  void operator()(X509* c) const { X509_free(c); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

struct Issued {
  Key key;
  Cert cert;
};

void add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) throw std::runtime_error(std::string("bad extension ") + value);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A P-256 key and a certificate for it: a CA when issuer is null (self-signed), else a leaf
// signed by issuer, valid from now+not_before_s to now+not_after_s, naming `sans`.
Issued issue(const std::string& cn, const Issued* issuer, const std::string& sans = "", long not_before_s = -3600,
             long not_after_s = 86400) {
  static std::atomic<long> serial{1};
  Issued out{Key(EVP_EC_gen("P-256")), Cert(X509_new())};
  X509* x = out.cert.get();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), not_before_s);
  X509_gmtime_adj(X509_getm_notAfter(x), not_after_s);
  X509_set_pubkey(x, out.key.get());
  X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* signer = issuer ? issuer->cert.get() : x;
  X509_set_issuer_name(x, X509_get_subject_name(signer));
  if (!issuer) {
    add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE");
    add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign");
    add_ext(x, x, NID_subject_key_identifier, "hash");
  } else {
    add_ext(x, signer, NID_basic_constraints, "CA:FALSE");
    add_ext(x, signer, NID_ext_key_usage, "serverAuth,clientAuth");
    if (!sans.empty()) add_ext(x, signer, NID_subject_alt_name, sans.c_str());
  }
  X509_sign(x, issuer ? issuer->key.get() : out.key.get(), EVP_sha256());
  return out;
}

void write_pem(const std::string& path, const Issued& i, bool key) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error("cannot write " + path);
  if (key) PEM_write_PrivateKey(f, i.key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  else PEM_write_X509(f, i.cert.get());
  std::fclose(f);
}

// Files of a CA, a server certificate for 127.0.0.1 and localhost, a client certificate, a second
// CA nobody trusts with its own client certificate, and an expired server certificate.
class Pki {
 public:
  // Shared by every test of the file (pki() below): removed by its destructor at exit.
  Pki() : dir_(make_temp_dir("thptrace-pki-", TempDirLife::owner)) {
    const Issued ca = issue("thptrace test CA", nullptr);
    const Issued other = issue("thptrace other CA", nullptr);
    save("ca", ca, false);
    save("other-ca", other, false);
    save_pair("server", issue("redis server", &ca, "DNS:localhost,IP:127.0.0.1"));
    save_pair("client", issue("thptrace client", &ca));
    save_pair("stranger", issue("thptrace stranger", &other));
    save_pair("expired", issue("redis server", &ca, "DNS:localhost,IP:127.0.0.1", -7200, -3600));
    save_pair("other-server", issue("redis server", &other, "DNS:localhost,IP:127.0.0.1"));
  }
  ~Pki() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // "ca.crt", "server.crt", "server.key", "client.crt", ...
  std::string file(const std::string& name) const { return dir_ + "/" + name; }

 private:
  void save(const std::string& name, const Issued& i, bool key) { write_pem(file(name + (key ? ".key" : ".crt")), i, key); }
  void save_pair(const std::string& name, const Issued& i) {
    save(name, i, false);
    save(name, i, true);
  }
  std::string dir_;
};

const Pki& pki() {
  static const Pki p;
  return p;
}

// ---- servers ------------------------------------------------------------------------------------

// A redis-server without a plain TCP port: TLS only (tls-port) or a unix socket only.
class SecureRedis {
 public:
  enum class Kind { tls, tls_client_auth, unix_socket };

  explicit SecureRedis(Kind kind, const std::string& cert = "server") : kind_(kind), dir_(make_temp_dir("thptrace-sredis-")) {
    std::vector<std::string> argv = {"redis-server", "--port", "0", "--bind", "127.0.0.1", "--dir", dir_, "--save", "",
                                     "--appendonly", "no", "--daemonize", "no", "--enable-debug-command", "local",
                                     "--logfile", dir_ + "/redis.log", "--repl-diskless-sync", "no",
                                     "--repl-diskless-sync-delay", "0"};
    if (kind == Kind::unix_socket) {
      address_.path = dir_ + "/redis.sock";
      argv.insert(argv.end(), {"--unixsocket", address_.path, "--unixsocketperm", "700"});
    } else {
      address_ = {"127.0.0.1", free_port()};
      argv.insert(argv.end(), {"--tls-port", std::to_string(address_.port), "--tls-cert-file", pki().file(cert + ".crt"),
                               "--tls-key-file", pki().file(cert + ".key"), "--tls-ca-cert-file", pki().file("ca.crt"),
                               "--tls-auth-clients", kind == Kind::tls_client_auth ? "yes" : "no"});
    }
    proc_ = std::make_unique<Process>(argv);
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < until) {
      redis::ConnectError e;
      if (auto c = client(&e); c && c->command({"PING"}) == "PONG") return;
      if (e.tls) return;  // it answers TLS, with a certificate we refuse (the expired one)
      std::this_thread::sleep_for(50ms);
    }
    std::ifstream log(dir_ + "/redis.log");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    throw std::runtime_error("redis-server did not start: " + proc_->err() + text.substr(text.size() > 2000 ? text.size() - 2000 : 0));
  }
  ~SecureRedis() {
    if (auto c = client()) c->command({"SHUTDOWN", "NOSAVE"});
    else proc_->signal(SIGTERM);  // no save point is configured: SIGTERM saves nothing
    if (!proc_->wait(10s)) proc_->signal(SIGKILL);
    proc_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  pid_t pid() const { return proc_->pid(); }
  const redis::Address& address() const { return address_; }
  bool tls() const { return kind_ != Kind::unix_socket; }

  // The flags that reach this server, for the capture and the daemon.
  std::vector<std::string> flags() const {
    std::vector<std::string> f = {"--redis", address_.str()};
    if (tls()) f.insert(f.end(), {"--redis-tls", "--redis-cacert", pki().file("ca.crt")});
    if (kind_ == Kind::tls_client_auth)
      f.insert(f.end(), {"--redis-cert", pki().file("client.crt"), "--redis-key", pki().file("client.key")});
    return f;
  }
  // redis-cli's flags for this server.
  std::vector<std::string> cli_flags() const {
    if (!tls()) return {"redis-cli", "-s", address_.path};
    return {"redis-cli", "-h", "127.0.0.1", "-p", std::to_string(address_.port), "--tls", "--cacert",
            pki().file("ca.crt"), "--cert", pki().file("client.crt"), "--key", pki().file("client.key")};
  }

  std::unique_ptr<redis::Client> client(redis::ConnectError* error = nullptr) const {
    redis::ConnectOptions o;
    o.timeout = 5000ms;
    if (tls()) {
      std::string error;
      o.tls = redis::TlsContext::create({.cacert = pki().file("ca.crt"), .capath = "", .cert = pki().file("client.crt"),
                                         .key = pki().file("client.key"), .server_name = ""},
                                        &error);
    }
    redis::ConnectError e;
    auto c = redis::Client::connect(address_, o, &e);
    if (error) *error = e;
    return c;
  }
  std::string cmd(const std::vector<std::string>& args) const {
    auto c = client();
    if (!c) throw std::runtime_error("cannot connect to " + address_.str());
    auto r = c->command(args);
    if (!r) throw std::runtime_error(args[0] + " failed: " + c->last_error());
    return *r;
  }
  std::string info_field(const std::string& key) const {
    return redis::info_str(redis::parse_info(cmd({"INFO", "everything"})), key);
  }
  // A full sync to a fresh replica, the way redis-cli --rdb asks for one (SYNC), over this
  // server's own transport: no replica needs a TCP port here.
  bool full_sync() const {
    std::vector<std::string> argv = cli_flags();
    argv.insert(argv.end(), {"--rdb", dir_ + "/copy.rdb"});
    Process cli(argv);
    return cli.wait(60s) == 0;
  }

 private:
  Kind kind_;
  std::string dir_;
  redis::Address address_;
  std::unique_ptr<Process> proc_;
};

// BGSAVE, a full sync over disk, a diskless one and BGREWRITEAOF under write load, captured through
// the server's TLS port or unix socket: four forks named by uprobes, and a Redis section.
void four_forks(SecureRedis::Kind kind) {
  SecureRedis server(kind);
  server.cmd({"DEBUG", "POPULATE", "200000", "key", "400"});
  const std::string dir = make_temp_dir("thptrace-scap-");
  const std::string json = dir + "/report.json";
  std::vector<std::string> args = {thptrace_bin(), "--pid", std::to_string(server.pid()), "--json", json};
  const auto flags = server.flags();
  args.insert(args.end(), flags.begin(), flags.end());
  Process tracer(args);
  ASSERT_TRUE(tracer.wait_stderr_line("tracing pid", 30s)) << tracer.err();
  std::this_thread::sleep_for(300ms);  // a baseline latency window before the first fork
  {
    WriteLoad load(server);
    server.cmd({"BGSAVE"});
    ASSERT_TRUE(wait_info(server, "rdb_bgsave_in_progress", "0", 60s));
    std::this_thread::sleep_for(300ms);
    ASSERT_TRUE(server.full_sync());
    ASSERT_TRUE(wait_info(server, "rdb_bgsave_in_progress", "0", 60s));
    server.cmd({"CONFIG", "SET", "repl-diskless-sync", "yes"});
    std::this_thread::sleep_for(300ms);
    ASSERT_TRUE(server.full_sync());
    ASSERT_TRUE(wait_info(server, "rdb_bgsave_in_progress", "0", 60s));
    std::this_thread::sleep_for(300ms);
    server.cmd({"BGREWRITEAOF"});
    ASSERT_TRUE(wait_info(server, "aof_rewrite_in_progress", "0", 60s));
    ASSERT_TRUE(wait_info(server, "aof_rewrite_scheduled", "0", 60s));
    std::this_thread::sleep_for(300ms);
    EXPECT_GT(load.writes(), 1000u);
  }
  tracer.signal(SIGINT);
  ASSERT_EQ(tracer.wait(60s), 0) << tracer.err();
  const auto report = read_json(json);
  std::filesystem::remove_all(dir);

  const auto& forks = report["forks"];
  ASSERT_EQ(forks.size(), 4u) << report.dump(2);
  const char* expected[] = {"bgsave", "full_sync_disk", "full_sync_diskless", "aof_rewrite"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(forks[i]["reason"], expected[i]) << report.dump(2);
    EXPECT_EQ(forks[i]["reason_source"], "uprobe");
    EXPECT_GT(forks[i]["cow_faults"].get<uint64_t>(), 0u) << "writes went on while the child lived";
  }
  ASSERT_TRUE(report.contains("redis")) << report.dump(2);
  EXPECT_EQ(report["redis"]["address"], server.address().str());
  EXPECT_EQ(report["redis"]["version"], server.info_field("redis_version"));
  EXPECT_EQ(report["redis"]["process_id"], server.pid());
  EXPECT_EQ(report["redis"]["total_forks_delta"], 4);
  EXPECT_TRUE(forks[0]["latency_during"].is_object()) << report.dump(2);
  EXPECT_TRUE(forks[0]["latency_before"].is_object()) << report.dump(2);
  EXPECT_EQ(leftover_thptrace_programs(), std::vector<std::string>{});
}

struct Outcome {
  int code = -1;
  std::string err;
};

// A capture of pid for one second with these Redis flags: its exit status and stderr.
Outcome capture(pid_t pid, const std::vector<std::string>& redis_flags) {
  std::vector<std::string> args = {thptrace_bin(), "--pid", std::to_string(pid), "--duration", "1"};
  args.insert(args.end(), redis_flags.begin(), redis_flags.end());
  Process p(args);
  const auto code = p.wait(60s);
  return {code.value_or(-1), p.err()};
}

std::string series(const std::string& name, const std::string& target, const std::string& reason = "") {
  return reason.empty() ? name + "{target=\"" + target + "\"}"
                        : name + "{reason=\"" + reason + "\",target=\"" + target + "\"}";
}

class Daemon {
 public:
  explicit Daemon(const std::vector<std::string>& args) : port_(free_port()) {
    std::vector<std::string> argv = {thptrace_bin(), "daemon", "--listen", "127.0.0.1:" + std::to_string(port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    proc_ = std::make_unique<Process>(argv);
  }
  Process& proc() { return *proc_; }
  std::optional<double> wait_for(const std::string& series, double want, std::chrono::seconds timeout = 30s) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    std::optional<double> v;
    while (std::chrono::steady_clock::now() < until) {
      v = metric_value(http_get(port_, "/metrics").value_or(""), series);
      if (v && *v >= want) return v;
      std::this_thread::sleep_for(100ms);
    }
    return v;
  }
  std::optional<double> value(const std::string& series) {
    return metric_value(http_get(port_, "/metrics").value_or(""), series);
  }

 private:
  int port_;
  std::unique_ptr<Process> proc_;
};

}  // namespace

TEST(SecureRedis, TlsOnlyServerFourForksWithTheirReasons) {
  REQUIRE_BPF();
  four_forks(SecureRedis::Kind::tls);
}

TEST(SecureRedis, TlsOnlyServerWithClientCertificatesFourForksWithTheirReasons) {
  REQUIRE_BPF();
  four_forks(SecureRedis::Kind::tls_client_auth);
}

TEST(SecureRedis, UnixSocketOnlyServerFourForksWithTheirReasons) {
  REQUIRE_BPF();
  four_forks(SecureRedis::Kind::unix_socket);
}

// Every way TLS can fail stops the capture before anything is attached, with its sentence: exit 1
// when the server or its certificate is wrong, 2 when our own flags or files are.
TEST(SecureRedis, EachTlsFailureHasItsSentenceAndExitStatus) {
  SecureRedis server(SecureRedis::Kind::tls);
  SecureRedis client_auth(SecureRedis::Kind::tls_client_auth);
  SecureRedis expired(SecureRedis::Kind::tls, "expired");
  RedisServer plain;
  const std::string port = std::to_string(server.address().port);
  const std::string at = "127.0.0.1:" + port;
  const std::string ca = pki().file("ca.crt");
  struct Case {
    const char* what;
    pid_t pid;
    std::vector<std::string> flags;
    int code;
    std::string sentence;
  };
  const std::vector<Case> cases = {
      {"unknown CA", server.pid(), {"--redis", at, "--redis-tls", "--redis-cacert", pki().file("other-ca.crt")}, 1,
       "thptrace: the certificate of Redis at " + at + " is signed by an unknown CA ("},
      {"name mismatch", server.pid(),
       {"--redis", at, "--redis-tls", "--redis-cacert", ca, "--redis-tls-server-name", "redis.example"}, 1,
       "thptrace: the certificate of Redis at " + at + " is not issued for redis.example (it names DNS:localhost, "
       "IP:127.0.0.1): connect by one of those names or give --redis-tls-server-name.\n"},
      {"expired certificate", expired.pid(),
       {"--redis", expired.address().str(), "--redis-tls", "--redis-cacert", ca}, 1,
       "thptrace: the certificate of Redis at " + expired.address().str() +
           " (DNS:localhost, IP:127.0.0.1) expired on "},
      {"server not speaking TLS", plain.pid(), {"--redis", plain.address(), "--redis-tls", "--redis-cacert", ca}, 1,
       "thptrace: Redis at " + plain.address() + " does not speak TLS ("},
      {"client certificate required", client_auth.pid(),
       {"--redis", client_auth.address().str(), "--redis-tls", "--redis-cacert", ca}, 1,
       "thptrace: Redis at " + client_auth.address().str() +
           " requires a client certificate (tls-auth-clients): give --redis-cert and --redis-key.\n"},
      {"client certificate of another CA", client_auth.pid(),
       {"--redis", client_auth.address().str(), "--redis-tls", "--redis-cacert", ca, "--redis-cert",
        pki().file("stranger.crt"), "--redis-key", pki().file("stranger.key")},
       1, "thptrace: Redis at " + client_auth.address().str() + " refused our client certificate ("},
      {"unreadable CA file", server.pid(), {"--redis", at, "--redis-tls", "--redis-cacert", "/nonexistent/ca.crt"}, 2,
       "thptrace: cannot read the CA certificates of --redis-cacert /nonexistent/ca.crt ("},
      {"key of another certificate", client_auth.pid(),
       {"--redis", client_auth.address().str(), "--redis-tls", "--redis-cacert", ca, "--redis-cert",
        pki().file("client.crt"), "--redis-key", pki().file("stranger.key")},
       2, "thptrace: the key --redis-key " + pki().file("stranger.key") + " does not belong to the certificate"},
      {"TLS on a unix socket", server.pid(), {"--redis", "unix:/run/redis.sock", "--redis-tls"}, 2,
       "thptrace: --redis unix:/run/redis.sock: Redis serves no TLS on a unix socket; drop --redis-tls.\n"},
      {"a TLS file without --redis-tls", server.pid(), {"--redis", at, "--redis-cacert", ca}, 2,
       "thptrace: --redis-cacert applies to TLS connections only: add --redis-tls.\n"},
  };
  for (const auto& c : cases) {
    const auto out = capture(c.pid, c.flags);
    EXPECT_EQ(out.code, c.code) << c.what << ": " << out.err;
    EXPECT_EQ(out.err.rfind(c.sentence, 0), 0u) << c.what << ": " << out.err;
    EXPECT_EQ(std::count(out.err.begin(), out.err.end(), '\n'), 1) << c.what << ": one sentence\n" << out.err;
  }
}

// One daemon watches a TLS-only server (client certificates required) and a unix-socket-only one:
// both up, their INFO figures exported, a BGSAVE of each counted with its reason. Its client key
// starts as one the server refuses; rotated on disk and re-read on SIGHUP, it is taken at once.
TEST(SecureRedis, DaemonWatchesTlsAndUnixServersAndRereadsItsKeyOnSighup) {
  REQUIRE_BPF();
  SecureRedis tls(SecureRedis::Kind::tls_client_auth);
  SecureRedis local(SecureRedis::Kind::unix_socket);
  const std::string keys = make_temp_dir("thptrace-keys-");
  std::filesystem::copy_file(pki().file("stranger.crt"), keys + "/client.crt");
  std::filesystem::copy_file(pki().file("stranger.key"), keys + "/client.key");
  Daemon d({"--redis", tls.address().str(), "--redis", local.address().str(), "--redis-tls", "--redis-cacert",
            pki().file("ca.crt"), "--redis-cert", keys + "/client.crt", "--redis-key", keys + "/client.key"});
  const std::string tls_label = tls.address().str(), unix_label = local.address().str();
  EXPECT_EQ(d.wait_for(series("thptrace_redis_up", unix_label), 1), 1) << d.proc().err();
  ASSERT_TRUE(d.proc().wait_stderr_line(tls_label + ": Redis not reachable (Redis at " + tls_label +
                                            " refused our client certificate", 30s))
      << d.proc().err();
  EXPECT_EQ(d.value(series("thptrace_redis_up", tls_label)), 0);

  std::filesystem::copy_file(pki().file("client.crt"), keys + "/client.crt", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(pki().file("client.key"), keys + "/client.key", std::filesystem::copy_options::overwrite_existing);
  d.proc().signal(SIGHUP);
  ASSERT_TRUE(d.proc().wait_stderr_line("reloaded the Redis password and TLS files", 10s)) << d.proc().err();
  EXPECT_EQ(d.wait_for(series("thptrace_redis_up", tls_label), 1), 1) << d.proc().err();

  for (const SecureRedis* s : {&tls, &local}) {
    s->cmd({"BGSAVE"});
    ASSERT_TRUE(wait_info(*s, "rdb_bgsave_in_progress", "0", 60s));
  }
  for (const auto& label : {tls_label, unix_label}) {
    EXPECT_EQ(d.wait_for(series("thptrace_forks_total", label, "bgsave"), 1), 1) << label << "\n" << d.proc().err();
    EXPECT_GE(d.wait_for(series("thptrace_redis_forks_total", label), 1).value_or(0), 1) << label;
  }
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
  std::filesystem::remove_all(keys);
}

// One daemon, three Redis with three logins: --redis-auth gives one server's its password file, another
// its ACL user and password from a directory laid out as a mounted Kubernetes basic-auth Secret, and the
// third, no rule matching it, the daemon's --redis-password-file. Each server accepts only its own login.
// The Secret starts with a stale password: that server alone is refused; the kubelet's way of rotating
// it (a new ..data directory swapped in) and SIGHUP bring it up, the others untouched. No password is
// ever logged.
TEST(SecureRedis, DaemonSendsEachTargetTheLoginItsRuleNames) {
  REQUIRE_BPF();
  RedisServer by_file({"--requirepass", "pw-of-the-first"});
  RedisServer by_secret({"--user", "thptrace", "on", ">pw-of-the-second", "~*", "+@all"});
  by_secret.cmd({"ACL", "SETUSER", "default", "off"});  // only the ACL user gets in
  const auto as_thptrace = [&](const std::vector<std::string>& args) {
    redis::ConnectError error;
    auto c = redis::Client::connect({"127.0.0.1", by_secret.port()},
                                    {.user = "thptrace", .password = "pw-of-the-second", .timeout = 5s}, &error);
    return c ? c->command(args) : std::nullopt;
  };
  RedisServer by_default({"--requirepass", "pw-of-the-third"});
  const std::string dir = make_temp_dir("thptrace-auth-rules-");
  { std::ofstream(dir + "/first") << "pw-of-the-first\n"; }
  { std::ofstream(dir + "/default") << "pw-of-the-third\n"; }
  const auto secret_version = [&](const std::string& version, const std::string& password) {
    std::filesystem::create_directories(dir + "/secret/" + version);
    std::ofstream(dir + "/secret/" + version + "/username") << "thptrace";
    std::ofstream(dir + "/secret/" + version + "/password") << password;
    std::filesystem::create_directory_symlink(version, dir + "/secret/..data_tmp");
    std::filesystem::rename(dir + "/secret/..data_tmp", dir + "/secret/..data");  // atomic, as the kubelet does
  };
  secret_version("..2026_12_03_10_00_00.1", "a-stale-one");
  std::filesystem::create_symlink("..data/username", dir + "/secret/username");
  std::filesystem::create_symlink("..data/password", dir + "/secret/password");
  Daemon d({"--redis", by_file.address(), "--redis", by_secret.address(), "--redis", by_default.address(),
            "--redis-auth", "127.0.0.1:" + std::to_string(by_secret.port()) + "=" + dir + "/secret", "--redis-auth",
            "127.0.0.1:" + std::to_string(by_file.port()) + "=" + dir + "/first", "--redis-password-file",
            dir + "/default"});
  EXPECT_EQ(d.wait_for(series("thptrace_redis_up", by_file.address()), 1), 1) << d.proc().err();
  EXPECT_EQ(d.wait_for(series("thptrace_redis_up", by_default.address()), 1), 1) << d.proc().err();
  ASSERT_TRUE(d.proc().wait_stderr_line(
      by_secret.address() + ": Redis not reachable (Redis at " + by_secret.address() + " rejected the credentials",
      30s))
      << d.proc().err();
  EXPECT_EQ(d.value(series("thptrace_redis_up", by_secret.address())), 0);

  secret_version("..2026_12_03_11_00_00.2", "pw-of-the-second");
  d.proc().signal(SIGHUP);
  ASSERT_TRUE(d.proc().wait_stderr_line("reloaded the Redis password, --redis-auth and TLS files", 10s))
      << d.proc().err();
  EXPECT_EQ(d.wait_for(series("thptrace_redis_up", by_secret.address()), 1), 1) << d.proc().err();
  for (const RedisServer* s : {&by_file, &by_default}) EXPECT_EQ(d.value(series("thptrace_redis_up", s->address())), 1);
  // Up on a server with the default user off: the Secret's username went with its password.
  EXPECT_EQ(as_thptrace({"ACL", "WHOAMI"}), "thptrace");
  const std::string err = d.proc().err();
  for (const char* secret : {"pw-of-the-first", "pw-of-the-second", "pw-of-the-third", "a-stale-one"})
    EXPECT_EQ(err.find(secret), std::string::npos) << secret << " was logged:\n" << err;
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
  as_thptrace({"ACL", "SETUSER", "default", "on"});  // for the fixture's own SHUTDOWN
  std::filesystem::remove_all(dir);
}

// --discover reads how each server listens from its own sockets: the unix-only one by its socket,
// the TLS-only one on its tls-port with the daemon's TLS settings; one whose certificate no CA of
// ours signed is still traced in the kernel and reported unreachable with the reason.
TEST(SecureRedis, DiscoverReachesUnixAndTlsServersAndNamesTheUnreachable) {
  REQUIRE_BPF();
  SecureRedis local(SecureRedis::Kind::unix_socket);
  SecureRedis tls(SecureRedis::Kind::tls_client_auth);
  SecureRedis foreign(SecureRedis::Kind::tls, "other-server");
  Daemon d({"--discover", "--redis-tls", "--redis-cacert", pki().file("ca.crt"), "--redis-cert",
            pki().file("client.crt"), "--redis-key", pki().file("client.key")});
  const std::string unix_label = local.address().str(), tls_label = tls.address().str();
  const std::string foreign_label = foreign.address().str();
  EXPECT_EQ(d.wait_for(series("thptrace_redis_up", unix_label), 1), 1) << d.proc().err();
  EXPECT_EQ(d.wait_for(series("thptrace_redis_up", tls_label), 1), 1) << d.proc().err();
  ASSERT_TRUE(d.proc().wait_stderr_line(foreign_label + ": Redis not reachable (", 30s)) << d.proc().err();
  EXPECT_NE(d.proc().err().find("is signed by an unknown CA"), std::string::npos) << d.proc().err();
  EXPECT_EQ(d.value(series("thptrace_redis_up", foreign_label)), 0);
  // The kernel side of the unreachable one: its BGSAVE (asked by a client that trusts its CA) is
  // counted, the reason from uprobes.
  redis::ConnectOptions o;
  std::string error;
  o.tls = redis::TlsContext::create({.cacert = pki().file("other-ca.crt"), .capath = "", .cert = "", .key = "",
                                     .server_name = ""},
                                    &error);
  redis::ConnectError e;
  auto c = redis::Client::connect(foreign.address(), o, &e);
  ASSERT_TRUE(c) << e.sentence;
  EXPECT_TRUE(c->command({"BGSAVE"}));
  EXPECT_EQ(d.wait_for(series("thptrace_forks_total", foreign_label, "bgsave"), 1), 1) << d.proc().err();
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
}
