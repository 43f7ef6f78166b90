// SPDX-License-Identifier: Apache-2.0
#pragma once
// Text from outside (process names, paths inside containers, symbols, Redis replies) made safe for
// the sink it is written to. Each function is total and leaves text that needs nothing unchanged,
// byte for byte.

#include <cstddef>
#include <string>
#include <string_view>

namespace thptrace::text {

// True when s is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_valid_utf8(std::string_view s);

// s as valid UTF-8: each ill-formed sequence replaced by one U+FFFD per maximal subpart (the
// replacement Unicode §3.9 recommends, and what browsers and Python's "replace" do). For JSON: its
// writer escapes control characters itself.
std::string valid_utf8(std::string_view s);

// For a line a person reads (the text report, a log line): valid UTF-8, and every control
// character written visibly (C0 and DEL as \xNN, C1 as \u00NN), so a value can neither break the
// line nor send a terminal escape sequence.
std::string printable(std::string_view s);

// For text a server sends (an error reply, a configuration value): at most max_bytes of it (then
// "..."), printable ASCII only, every other byte and the backslash written as \xNN.
std::string ascii_printable(std::string_view s, size_t max_bytes);

// For XML 1.0 character data and attribute values (SVG, HTML): printable(s), the characters XML 1.0
// forbids even as references (U+FFFE, U+FFFF) replaced by U+FFFD, and & < > " ' as entities.
std::string xml_escape(std::string_view s);

}  // namespace thptrace::text
