// SPDX-License-Identifier: Apache-2.0
// `thptrace probe [--json] [--force-fallback] [--redis-binary PATH ...]`: the attach mode each probe
// family gets on this kernel, and why; which fork entry points each Redis/Valkey binary gives.
#include <fmt/core.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/capture.h"
#include "common/error.h"
#include "common/program_options.h"
#include "tracer/entry_points.h"
#include "tracer/probe.h"
#include "tracer/tracer.h"

namespace po = boost::program_options;

namespace thptrace::cli {

int probe_main(int argc, char** argv) {
  po::options_description desc("thptrace probe: which attach mode each probe family gets on this kernel");
  desc.add_options()("help,h", "show this help")("json", "print JSON")(
      "force-fallback", "show the modes --force-fallback would use")(
      "redis-binary", po::value<std::vector<std::string>>()->composing(),
      "redis-server or valkey-server binary whose fork entry points to show (repeatable; default: "
      "/usr/bin/redis-server and /usr/bin/valkey-server where present)");
  po::variables_map vm;
  if (const auto error = parse_options(desc, argc, argv, vm))
    throw FatalError(kExitUsage, "probe: " + *error + " (see thptrace probe --help).");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return kExitOk;
  }
  std::vector<std::string> binaries;
  if (vm.count("redis-binary")) {
    binaries = vm["redis-binary"].as<std::vector<std::string>>();
    for (const auto& b : binaries)
      if (::access(b.c_str(), R_OK) != 0) throw FatalError(kExitUsage, "probe: cannot read --redis-binary " + b + ".");
  } else {
    for (const char* b : {"/usr/bin/redis-server", "/usr/bin/valkey-server"})
      if (::access(b, R_OK) == 0) binaries.emplace_back(b);
  }
  auto r = tracer::choose_modes(vm.count("force-fallback") > 0, binaries.empty() ? std::string() : binaries[0]);
  std::vector<tracer::BinaryEntryPoints> entry_points;
  for (const auto& b : binaries) entry_points.push_back(tracer::find_entry_points(b));
  // The answer is what a capture would load: the real programs, through the same Tracer, which moves
  // a family the kernel refuses down its chain. Without the privilege to load anything the stand-in
  // programs' reasons are the answer.
  std::string refused;
  if (r.unsupported.empty() && r.fork.mode != tracer::Mode::unavailable && r.cow_fault.mode != tracer::Mode::unavailable) {
    try {
      tracer::Tracer t(r);
      r = t.modes();
    } catch (const FatalError& e) {
      refused = e.what();
    }
  } else if (!r.unsupported.empty()) {
    refused = r.unsupported + ".";
  }
  if (vm.count("json")) {
    nlohmann::ordered_json j;
    j["kernel_release"] = r.kernel_release;
    j["btf"] = r.btf;
    j["bpf_atomics"] = r.bpf_atomics;
    j["task_storage"] = r.task_storage;
    j["forced_fallback"] = r.forced_fallback;
    for (const auto& f : tracer::kFamilies)
      j["families"][f.name] = {{"mode", tracer::mode_name(r.at(f.family).mode)}, {"why", r.at(f.family).why}};
    if (!refused.empty()) j["error"] = refused;
    j["redis_binaries"] = nlohmann::ordered_json::array();
    for (const auto& b : entry_points) {
      nlohmann::ordered_json e;
      e["binary"] = b.binary;
      for (const auto& f : b.found)
        e["entry_points"][f.entry->names[0]] = f.symbol.empty() ? nlohmann::ordered_json{{"missing", f.why}}
                                                                : nlohmann::ordered_json{{"symbol", f.symbol}};
      for (const auto& c : tracer::label_coverage(b.anchors()))
        e["labels"][c.reason] = c.by_uprobe ? std::string("uprobe") : "info: " + c.why;
      j["redis_binaries"].push_back(e);
    }
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("kernel {}  BTF {}  BPF atomics {}  task storage {}{}\n", r.kernel_release, r.btf ? "yes" : "no",
               r.bpf_atomics ? "yes" : "no (before 5.12)", r.task_storage ? "yes" : "no",
               r.forced_fallback ? "  (fallback forced)" : "");
    for (const auto& f : tracer::kFamilies)
      fmt::print("  {:<13} {:<13} {}\n", f.name, tracer::mode_name(r.at(f.family).mode), r.at(f.family).why);
    for (const auto& b : entry_points) fmt::print("{}: {}\n", b.binary, tracer::describe(b));
  }
  // A kernel that cannot run a capture is a runtime failure, said in one sentence after the table.
  if (!refused.empty()) throw FatalError(kExitRuntime, refused);
  return kExitOk;
}

}  // namespace thptrace::cli
