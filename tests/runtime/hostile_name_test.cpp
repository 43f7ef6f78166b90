// SPDX-License-Identifier: Apache-2.0
// A traced process whose name holds a byte that is not UTF-8, a control character and markup: the
// capture still writes every file it was asked for, the JSON valid against the schema, the timeline
// well-formed XML (as an SVG document and inside the HTML page). And a file that cannot be written
// costs that file only.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

// Exit status of python3 running `script` with `path` as its argument.
int python(const std::string& script, const std::string& path) {
  const std::string cmd = "/usr/bin/python3 -c '" + script + "' '" + path + "'";
  return std::system(cmd.c_str());
}

// Parses the file as XML (strict UTF-8); with html, the SVG element the page holds.
constexpr const char* kParseXml =
    "import sys, xml.etree.ElementTree as E\n"
    "s = open(sys.argv[1], encoding=\"utf-8\", errors=\"strict\").read()\n"
    "if sys.argv[1].endswith(\".html\"): s = s[s.index(\"<svg\"):s.rindex(\"</svg>\") + 6]\n"
    "root = E.fromstring(s)\n"
    "assert root.tag.endswith(\"svg\"), root.tag\n";

void capture_odd_name(const std::string& timeline_name) {
  const std::string dir = make_temp_dir("thptrace-oddname-");
  const std::string json = dir + "/report.json", timeline = dir + "/" + timeline_name;
  Process work({ODD_NAME_BIN});
  ASSERT_TRUE(work.wait_stdout_line("ready", 10s)) << work.err();
  const std::string status = [&] {
    std::ifstream in("/proc/" + std::to_string(work.pid()) + "/status");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }();
  ASSERT_NE(status.find("Name:\t\xff"), std::string::npos) << "prctl did not take: " << status.substr(0, 40);
  Process tracer(
      {thptrace_bin(), "--pid", std::to_string(work.pid()), "--duration", "2", "--json", json, "--svg", timeline});
  ASSERT_TRUE(tracer.wait_stderr_line("tracing pid", 30s)) << tracer.err();
  work.write_stdin("go\n");
  EXPECT_TRUE(work.wait_stdout_line("forked", 10s));
  ASSERT_EQ(tracer.wait(30s), 0) << tracer.err();
  EXPECT_EQ(tracer.err().find("unexpected error"), std::string::npos) << tracer.err();
  const auto report = read_json(json);  // parses, and matches docs/reference/report.schema.json
  const auto comm = report["target"]["comm"].get<std::string>();
  EXPECT_EQ(comm.substr(0, 5), "\xEF\xBF\xBD\x01<") << comm;  // U+FFFD for 0xFF; the rest kept
  EXPECT_EQ(report["forks"].size(), 1u) << report.dump(2);
  EXPECT_EQ(python(kParseXml, timeline), 0) << timeline << " is not well-formed";
  EXPECT_EQ(std::vector<std::string>(), [&] {  // no temporary file left beside them
    std::vector<std::string> stray;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path() != json && e.path() != timeline) stray.push_back(e.path().string());
    return stray;
  }());
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST(HostileName, CaptureOfANonUtf8NameWritesValidJsonAndSvg) {
  REQUIRE_BPF();
  capture_odd_name("timeline.svg");
}

TEST(HostileName, CaptureOfANonUtf8NameWritesValidJsonAndHtml) {
  REQUIRE_BPF();
  capture_odd_name("timeline.html");
}

// The timeline's path is a directory: its rename fails after the capture, the JSON is still
// written whole, the failure is one sentence and the exit status 1.
TEST(HostileName, AFileThatCannotBeWrittenLeavesTheOthersAndExitsOne) {
  REQUIRE_BPF();
  const std::string dir = make_temp_dir("thptrace-oddname-");
  const std::string json = dir + "/report.json", timeline = dir + "/timeline.svg";
  std::filesystem::create_directory(timeline);
  Process work({ODD_NAME_BIN});
  ASSERT_TRUE(work.wait_stdout_line("ready", 10s)) << work.err();
  Process tracer(
      {thptrace_bin(), "--pid", std::to_string(work.pid()), "--duration", "1", "--json", json, "--svg", timeline});
  ASSERT_EQ(tracer.wait(30s), 1) << tracer.err();
  EXPECT_NE(tracer.err().find("cannot write the timeline to " + timeline + ": "), std::string::npos) << tracer.err();
  EXPECT_EQ(read_json(json)["target"]["pid"], work.pid());
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 2u) << "a temporary file was left in " << dir;
  EXPECT_TRUE(std::filesystem::is_empty(timeline));
  std::filesystem::remove_all(dir);
}
