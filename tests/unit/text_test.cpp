// SPDX-License-Identifier: Apache-2.0
// Text made safe for its sink (common/text.h): ill-formed UTF-8 replaced as Unicode recommends,
// control characters made visible, XML's special characters escaped, valid text left alone.
#include "common/text.h"

#include <gtest/gtest.h>

#include <vector>

namespace thptrace::text {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Text, ValidUtf8IsLeftByteIdentical) {
  for (const std::string& s :
       std::vector<std::string>{"", "redis-server", "thptrace 1.2 — capture ± 3 ✕", "\xF0\x9F\x98\x80 emoji",
                                std::string("nul\0inside", 10), "\x7F\x01\n"}) {
    EXPECT_TRUE(is_valid_utf8(s)) << s;
    EXPECT_EQ(valid_utf8(s), s);
  }
}

TEST(Text, EachIllFormedSubpartBecomesOneReplacementCharacter) {
  EXPECT_EQ(valid_utf8("a\xFF"
                       "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(valid_utf8("\xC0\xAF"), kFffd + kFffd);                          // overlong '/': two subparts
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);              // a surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // past U+10FFFF
  EXPECT_EQ(valid_utf8("\xE2\x82"), kFffd);                                  // truncated: one maximal subpart
  EXPECT_EQ(valid_utf8("\xE2\x82x"), kFffd + "x");
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98"), kFffd);
  EXPECT_EQ(valid_utf8("\x80\x80"), kFffd + kFffd);
  EXPECT_FALSE(is_valid_utf8("\xFF"));
  EXPECT_TRUE(is_valid_utf8(valid_utf8("\xFE\xFF\xC3\x28\xE0\x80\x80\xF8\x88\x80\x80\x80")));
}

TEST(Text, PrintableShowsControlCharactersAndCannotBreakALine) {
  EXPECT_EQ(printable("redis-server"), "redis-server");
  EXPECT_EQ(printable("a\nb\tc\x1b[31m\x7F"), "a\\x0ab\\x09c\\x1b[31m\\x7f");
  EXPECT_EQ(printable("\xC2\x9B"
                      "2J"),
            "\\u009b2J");  // C1 CSI
  EXPECT_EQ(printable("\xFF\x01<&"), kFffd + "\\x01<&");
}

TEST(Text, XmlEscapeLeavesNoMarkupAndNoForbiddenCharacter) {
  EXPECT_EQ(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  EXPECT_EQ(xml_escape("\xFF\x01<&"), kFffd + "\\x01&lt;&amp;");
  EXPECT_EQ(xml_escape("\xEF\xBF\xBE\xEF\xBF\xBF"), kFffd + kFffd);  // U+FFFE, U+FFFF
  EXPECT_EQ(xml_escape("redis 7.0.15 at 127.0.0.1:6379"), "redis 7.0.15 at 127.0.0.1:6379");
}

}  // namespace
}  // namespace thptrace::text
