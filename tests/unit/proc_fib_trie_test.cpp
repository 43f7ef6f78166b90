// SPDX-License-Identifier: Apache-2.0
// The local addresses of a network namespace from its fib_trie (proc/net.h): each once, in
// order, only in canonical dotted form.
#include <gtest/gtest.h>

#include <string>

#include "proc/net.h"

using namespace thptrace::proc;

TEST(FibTrie, EachLocalAddressOnceAndOnlyCanonical) {
  std::string text =
      "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 10.88.0.10\n        /32 host LOCAL\n"
      "     |-- 127.0.0.1\n        /32 host LOCAL\n"
      "     |-- 10.88.0.10\n        /32 host LOCAL\n"
      "     |-- 010.1.2.3\n        /32 host LOCAL\n"
      "     |-- 192.0.2.7\n        /32 host LOCAL\n";
  constexpr char with_nul[] = "     |-- 192.0.2.8\0junk\n        /32 host LOCAL\n";
  text += std::string(with_nul, sizeof with_nul - 1);
  const auto locals = parse_local_ipv4(text);
  ASSERT_EQ(locals.size(), 2u);
  EXPECT_EQ(locals[0], "10.88.0.10");
  EXPECT_EQ(locals[1], "192.0.2.7");
}
