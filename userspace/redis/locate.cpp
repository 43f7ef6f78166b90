// SPDX-License-Identifier: Apache-2.0
#include "redis/locate.h"

#include "redis/parse.h"

namespace thptrace::redis {

proc::ServerClaim claim_from_replies(const std::string& address, std::string_view client_info, std::string_view info) {
  proc::ServerClaim c;
  c.address = address;
  while (!client_info.empty()) {
    const auto sp = client_info.find_first_of(" \r\n");
    const auto field = client_info.substr(0, sp);
    client_info = sp == std::string_view::npos ? std::string_view{} : client_info.substr(sp + 1);
    const auto eq = field.find('=');
    if (eq == std::string_view::npos) continue;
    const auto key = field.substr(0, eq);
    if (key == "laddr")
      c.server_side = proc::parse_endpoint(field.substr(eq + 1));
    else if (key == "addr")
      c.client_side = proc::parse_endpoint(field.substr(eq + 1));
  }
  const auto map = parse_info(info);
  c.process_id = info_int(map, "process_id").value_or(0);
  c.uptime_s = info_int(map, "uptime_in_seconds");
  return c;
}

proc::Resolution locate_server(const Address& addr, const std::string& user, const std::string& password,
                               std::chrono::milliseconds timeout) {
  return locate_server(addr, ConnectOptions{.user = user, .password = password, .timeout = timeout});
}

proc::Resolution locate_server(const Address& addr, const ConnectOptions& options) {
  ConnectError error;
  auto client = Client::connect(addr, options, &error);
  if (!client) return {.pid = 0, .how = {}, .error = error.sentence};
  const auto info = client->info("server");
  if (!info) return {.pid = 0, .how = {}, .error = "INFO server failed at " + addr.str() + ": " + client->last_error()};
  // CLIENT INFO exists since Redis 6.2; before it the claim has no socket pair and resolve_server
  // looks for a local listener.
  const auto client_info = client->command({"CLIENT", "INFO"});
  return proc::resolve_server(claim_from_replies(addr.str(), client_info.value_or(""), *info));
}

}  // namespace thptrace::redis
