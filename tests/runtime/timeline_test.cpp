// SPDX-License-Identifier: Apache-2.0
// The capture's timeline (--svg) of a workload whose answer is known (N pages dirtied while its
// fork child lives): the fault buckets hold the report's own counts, inside the fork window, and the
// window is drawn where the fork was, checked on the pixels headless Chromium renders.
#include <png.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "harness.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

constexpr size_t kPages = 16384;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The first element with class `cls`: its attribute `name` ("" when absent).
std::string attribute(const std::string& svg, const std::string& cls, const std::string& name, size_t nth = 0) {
  const std::regex element("<[a-z]+ [^>]*class=\"" + cls + "\"[^>]*>");
  auto it = std::sregex_iterator(svg.begin(), svg.end(), element);
  for (size_t i = 0; i < nth && it != std::sregex_iterator(); ++i) ++it;
  if (it == std::sregex_iterator()) return "";
  const std::string e = it->str();
  std::smatch m;
  const std::regex attr(" " + name + "=\"([^\"]*)\"");
  return std::regex_search(e, m, attr) ? m[1].str() : std::string();
}

struct Image {
  unsigned width = 0, height = 0;
  std::vector<uint8_t> rgb;
  std::array<int, 3> at(double x, double y) const {
    const size_t i = (static_cast<size_t>(y) * width + static_cast<size_t>(x)) * 3;
    return {rgb[i], rgb[i + 1], rgb[i + 2]};
  }
};

std::optional<Image> read_png(const std::string& path) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&png, path.c_str())) return std::nullopt;
  png.format = PNG_FORMAT_RGB;
  Image img{png.width, png.height, std::vector<uint8_t>(PNG_IMAGE_SIZE(png))};
  if (!png_image_finish_read(&png, nullptr, img.rgb.data(), 0, nullptr)) return std::nullopt;
  return img;
}

}  // namespace

TEST(CaptureTimeline, KnownFaultsInTheirForkWindowDrawnWhereTheForkWas) {
  REQUIRE_BPF();
  const std::string dir = make_temp_dir("thptrace-timeline-");
  const std::string json = dir + "/report.json", svg_path = dir + "/timeline.svg";
  // The child lives 300 ms past the last write: the counters are read every 10 ms by a thread that a
  // busy host can run late, and a copy counts in the bucket of the read that saw it.
  Process work({workload_bin(), std::to_string(kPages), "600", "4k", "linger=300"});
  ASSERT_TRUE(work.wait_stdout_line("ready", 20s)) << work.err();
  Process tracer(
      {thptrace_bin(), "--pid", std::to_string(work.pid()), "--duration", "30", "--json", json, "--svg", svg_path});
  ASSERT_TRUE(tracer.wait_stderr_line("tracing pid", 30s)) << tracer.err();
  std::this_thread::sleep_for(400ms);  // a stretch before the fork, to tell the window from the start
  work.write_stdin("go\n");
  EXPECT_TRUE(work.wait_stdout_line("done", 60s));
  EXPECT_EQ(work.wait(10s), 0);
  ASSERT_EQ(tracer.wait(30s), 0) << tracer.err();
  const auto report = read_json(json);
  const std::string svg = slurp(svg_path);
  ASSERT_EQ(report["forks"].size(), 1u) << report.dump(2);
  const auto& fork = report["forks"][0];

  // The buckets add up to the report's counts (the same in-kernel counters), N or more, and hold
  // them inside the fork window (one bucket of slack either side: a read lands in the bucket it ends).
  const uint64_t cow = report["totals"]["cow_faults"].get<uint64_t>();
  EXPECT_GE(cow, kPages);
  // The parent's faults drawn as copies (buckets a fork window meets) and reuse (the rest): together
  // the report's count.
  EXPECT_EQ(
      std::stoull(attribute(svg, "cow-parent", "data-total")) + std::stoull(attribute(svg, "cow-reuse", "data-total")),
      cow);
  EXPECT_EQ(attribute(svg, "cow-child", "data-total"),
            std::to_string(report["totals"]["child_cow_faults"].get<uint64_t>()));
  const double bucket_ms = std::stod(attribute(svg, "timeline", "data-bucket-ms"));
  EXPECT_EQ(bucket_ms, 10.0);
  const double fork_ms = fork["fork_ts_ms"].get<double>(), exit_ms = fork["exit_ts_ms"].get<double>();
  std::istringstream values(attribute(svg, "cow-parent", "data-buckets"));
  uint64_t inside = 0, i = 0;
  for (std::string v; std::getline(values, v, ','); ++i) {
    const double t = static_cast<double>(i) * bucket_ms;
    if (t >= fork_ms - bucket_ms && t <= exit_ms + bucket_ms) inside += std::stoull(v);
  }
  EXPECT_GE(inside, kPages) << attribute(svg, "cow-parent", "data-buckets");
  EXPECT_NEAR(std::stod(attribute(svg, "fork", "data-start-ms")), fork_ms, 0.001);
  EXPECT_NEAR(std::stod(attribute(svg, "fork", "data-end-ms")), exit_ms, 0.001);
  // The fork's freeze, marked for as long as the report says it took.
  EXPECT_NEAR(std::stod(attribute(svg, "freeze", "data-freeze-ms")), fork["fork_duration_us"].get<double>() / 1e3,
              0.001);

  // Rendered by a real browser: the picture has the SVG's size, and the THP panel's band (the
  // second fork band; nothing else drawn at a quarter of its height) is shaded inside the window
  // and white before the fork.
  const char* chromium = "/usr/bin/chromium";
  ASSERT_TRUE(std::filesystem::exists(chromium)) << "chromium is missing (scripts/install-deps.sh installs it)";
  const int height = std::stoi(attribute(svg, "timeline", "height"));
  const std::string png = dir + "/timeline.png";
  Process browser({chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   "--user-data-dir=" + dir + "/chromium", "--window-size=1000," + std::to_string(height),
                   "--screenshot=" + png, "file://" + svg_path});
  ASSERT_EQ(browser.wait(120s), 0) << browser.err();
  const auto img = read_png(png);
  ASSERT_TRUE(img) << "cannot read " << png;
  EXPECT_EQ(img->width, 1000u);
  EXPECT_EQ(img->height, static_cast<unsigned>(height));
  const double x = std::stod(attribute(svg, "forkband", "x", 1)), w = std::stod(attribute(svg, "forkband", "width", 1));
  const double y =
      std::stod(attribute(svg, "forkband", "y", 1)) + std::stod(attribute(svg, "forkband", "height", 1)) / 4;
  const double left = std::stod(attribute(svg, "timeline", "data-plot-left"));
  ASSERT_GT(x - left, 20) << "the fork came too early to see white before it";
  const auto shaded = img->at(x + w / 2, y), before = img->at(left + (x - left) / 2, y);
  // #f28e2b at 22% over white: about (252, 230, 208).
  EXPECT_GE(shaded[0], 240);
  EXPECT_GE(shaded[1] - shaded[2], 10) << shaded[0] << "," << shaded[1] << "," << shaded[2];
  EXPECT_LE(shaded[2], 225);
  for (int c : before) EXPECT_GE(c, 250) << before[0] << "," << before[1] << "," << before[2];
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}
