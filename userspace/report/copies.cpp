// SPDX-License-Identifier: Apache-2.0
#include "report/copies.h"

#include <fmt/format.h>

namespace thptrace::report {

namespace {

using nlohmann::ordered_json;

ordered_json groups_json(const std::vector<correlate::CopyGroup>& groups, const char* key, bool leaf) {
  ordered_json out = ordered_json::array();
  for (const auto& g : groups) {
    ordered_json x = {{key, g.name}};
    if (leaf) x["leaf"] = g.leaf;
    x["samples"] = g.samples;
    x["share"] = g.share;
    x["estimated"] = g.estimated;
    x["estimated_error"] = g.estimated_error;
    out.push_back(std::move(x));
  }
  return out;
}

std::vector<correlate::CopyGroup> groups_from(const nlohmann::json& j, const char* key, bool leaf) {
  std::vector<correlate::CopyGroup> out;
  for (const auto& x : j) {
    correlate::CopyGroup g;
    g.name = x.at(key).get<std::string>();
    if (leaf) g.leaf = x.at("leaf").get<std::string>();
    g.samples = x.at("samples").get<uint64_t>();
    g.share = x.at("share").get<double>();
    g.estimated = x.at("estimated").get<uint64_t>();
    g.estimated_error = x.at("estimated_error").get<uint64_t>();
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

ordered_json copies_json(const correlate::CopyAttribution& a) {
  return {{"sample_every", a.sample_every},
          {"samples", a.samples},
          {"estimated", a.estimated},
          {"estimated_error", a.estimated_error},
          {"copy_ratio", a.copy_ratio ? ordered_json(*a.copy_ratio) : ordered_json(nullptr)},
          {"stacks_partial", a.stacks_partial.empty() ? ordered_json(nullptr) : ordered_json(a.stacks_partial)},
          {"paths", groups_json(a.paths, "path", true)},
          {"functions", groups_json(a.functions, "function", false)},
          {"mappings", groups_json(a.mappings, "mapping", false)},
          {"by_command", groups_json(a.commands, "command", false)},
          {"dwarf_samples", a.dwarf_samples}};
}

correlate::CopyAttribution copies_from(const nlohmann::json& j) {
  correlate::CopyAttribution a;
  a.sample_every = j.at("sample_every").get<uint32_t>();
  a.samples = j.at("samples").get<uint64_t>();
  a.estimated = j.at("estimated").get<uint64_t>();
  a.estimated_error = j.at("estimated_error").get<uint64_t>();
  if (!j.at("copy_ratio").is_null()) a.copy_ratio = j.at("copy_ratio").get<double>();
  if (!j.at("stacks_partial").is_null()) a.stacks_partial = j.at("stacks_partial").get<std::string>();
  a.paths = groups_from(j.at("paths"), "path", true);
  a.functions = groups_from(j.at("functions"), "function", false);
  a.mappings = groups_from(j.at("mappings"), "mapping", false);
  // Added in report_version 1.1: absent from older reports.
  if (j.contains("by_command")) a.commands = groups_from(j.at("by_command"), "command", false);
  a.dwarf_samples = j.value("dwarf_samples", uint64_t{0});
  return a;
}

std::string commands_text(const correlate::CopyAttribution& a, double min_share) {
  std::string c;
  for (const auto& g : a.commands)
    if (g.share >= min_share) c += fmt::format("{}{} {:.0f}%", c.empty() ? "" : ", ", g.name, g.share * 100);
  return c;
}

std::vector<std::string> copies_lines(const correlate::CopyAttribution& a) {
  std::vector<std::string> out;
  const std::string indent = "           ";
  // The count is exact on the fork's line; the samples give the shares.
  out.push_back(fmt::format(
      "{}copies by code path, from {} samples (1 in {} at random){}", indent, a.samples, a.sample_every,
      a.copy_ratio ? fmt::format("; copied {:.1f}% of the RSS at fork", *a.copy_ratio * 100) : std::string()));
  for (const auto& p : a.paths) out.push_back(fmt::format("{}  {:5.1f}%  {}", indent, p.share * 100, p.name));
  if (!a.commands.empty()) {
    out.push_back(fmt::format("{}  by command: {}", indent, commands_text(a)));
  }
  if (!a.mappings.empty()) {
    std::string m;
    for (const auto& g : a.mappings) m += fmt::format("{}{} {:.1f}%", m.empty() ? "" : ", ", g.name, g.share * 100);
    out.push_back(fmt::format("{}  by mapping: {}", indent, m));
  }
  if (!a.stacks_partial.empty())
    out.push_back(fmt::format("{}  stacks partial: {}; copies are attributed to the faulting function", indent,
                              a.stacks_partial));
  return out;
}

}  // namespace thptrace::report
