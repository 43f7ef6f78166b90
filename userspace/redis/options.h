// SPDX-License-Identifier: Apache-2.0
#pragma once
// The flags (and config-file keys) that say how to reach Redis besides its address, the same in the
// capture and the daemon: --redis-user, --redis-password-file, --redis-tls and its files.

#include <boost/program_options.hpp>
#include <string>

#include "redis/credentials.h"

namespace thptrace {

inline void add_redis_connection_options(boost::program_options::options_description& desc) {
  namespace po = boost::program_options;
  desc.add_options()("redis-password-file", po::value<std::string>(), "file whose first line is the Redis password")(
      "redis-user", po::value<std::string>(), "Redis ACL user (with --redis-password-file)")(
      "redis-tls", po::value<bool>()->default_value(false)->implicit_value(true),
      "connect to Redis over TLS (its tls-port), verifying its certificate and name")(
      "redis-cacert", po::value<std::string>(), "PEM file of the CAs that sign the Redis certificate")(
      "redis-capath", po::value<std::string>(),
      "directory of hashed CA certificates (instead of, or with, --redis-cacert)")(
      "redis-cert", po::value<std::string>(), "client certificate, for a Redis with tls-auth-clients (PEM)")(
      "redis-key", po::value<std::string>(), "private key of --redis-cert (unencrypted PEM)")(
      "redis-tls-server-name", po::value<std::string>(),
      "name the Redis certificate must hold, sent as SNI (default: the host of --redis)");
}

// The settings from parsed flags; check them with redis::check_settings().
inline redis::ConnectionSettings redis_connection_settings(const boost::program_options::variables_map& vm) {
  redis::ConnectionSettings s;
  const auto text = [&vm](const char* name) { return vm.count(name) ? vm[name].as<std::string>() : std::string(); };
  s.user = text("redis-user");
  s.password_file = text("redis-password-file");
  s.tls = vm.count("redis-tls") && vm["redis-tls"].as<bool>();
  s.tls_options = {.cacert = text("redis-cacert"),
                   .capath = text("redis-capath"),
                   .cert = text("redis-cert"),
                   .key = text("redis-key"),
                   .server_name = text("redis-tls-server-name")};
  return s;
}

}  // namespace thptrace
