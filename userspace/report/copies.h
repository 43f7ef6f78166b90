// SPDX-License-Identifier: Apache-2.0
#pragma once
// A fork's `copies` section (correlate::CopyAttribution) in the JSON report, read back, and as the
// text report's lines under the fork's row.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "correlate/copies.h"

namespace thptrace::report {

nlohmann::ordered_json copies_json(const correlate::CopyAttribution& a);
// Throws nlohmann::json::exception when a key is missing or has another type.
correlate::CopyAttribution copies_from(const nlohmann::json& j);
std::vector<std::string> copies_lines(const correlate::CopyAttribution& a);
// "SET 81%, expire cycle 12%, ...": the copies by command, those of at least min_share.
std::string commands_text(const correlate::CopyAttribution& a, double min_share = 0);

}  // namespace thptrace::report
