// SPDX-License-Identifier: Apache-2.0
// The capture's timeline (report::timeline_document, SVG and HTML) of a report whose names are
// arbitrary bytes: valid UTF-8, no control byte, and no markup but the writer's own: every '<'
// opens one of the elements the timeline draws, every '&' starts an entity, and attribute values
// hold neither '<' nor a raw '&'.
#include <set>
#include <string>

#include "common/text.h"
#include "fuzz_check.h"
#include "report/timeline.h"
#include "writers.h"

using namespace thptrace;

namespace {

bool is_entity_at(const std::string& s, size_t i) {
  for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&#39;"})
    if (s.compare(i, std::char_traits<char>::length(e), e) == 0) return true;
  return false;
}

// Walks the document's markup; false at the first '<' or '&' a name could have put there.
bool only_own_markup(const std::string& doc) {
  static const std::set<std::string> kElements = {"svg",  "style", "rect", "text", "line", "path",    "title",
                                                  "html", "head",  "meta", "body", "?xml", "!DOCTYPE"};
  for (size_t i = 0; i < doc.size(); ++i) {
    if (doc[i] == '&' && !is_entity_at(doc, i)) return false;
    if (doc[i] != '<') continue;
    size_t k = i + 1;
    if (k < doc.size() && doc[k] == '/') ++k;
    const size_t end = doc.find_first_of(" />\n", k);
    if (end == std::string::npos || !kElements.count(doc.substr(k, end - k))) return false;
    // To the tag's end: attribute values in double quotes.
    bool quoted = false;
    for (i = end; i < doc.size() && (quoted || doc[i] != '>'); ++i) {
      if (doc[i] == '"') quoted = !quoted;
      if (quoted && doc[i] == '<') return false;
      if (quoted && doc[i] == '&' && !is_entity_at(doc, i)) return false;
    }
    if (i == doc.size()) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Bytes in(data, size);
  report::CaptureInputs inputs;
  const bool html = in.flag();
  const report::Report r = fuzz::fuzzed_report(in, inputs);
  const std::string doc = report::timeline_document(r, inputs, html);
  FUZZ_CHECK(text::is_valid_utf8(doc));
  FUZZ_CHECK(fuzz::only_line_breaks(doc));
  FUZZ_CHECK(only_own_markup(doc));
  return 0;
}
