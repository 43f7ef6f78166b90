// SPDX-License-Identifier: Apache-2.0
#pragma once
// The head of a Redis RDB file: the auxiliary fields a save writes after the magic ("REDIS0011"),
// before the data: "redis-ver", "ctime", "used-mem" (the server's used_memory as the save began),
// ... Each is the opcode 0xFA and two strings in the RDB's length encoding: a plain string, or an
// integer packed into 1, 2 or 4 bytes, or LZF-compressed. The file is the server's, on a disk
// anyone with write access to its directory may have replaced: every length is checked against the
// bytes there are.

#include <cstdint>
#include <optional>
#include <string_view>

namespace thptrace::redis {

// How many bytes of the file's start are read for its auxiliary fields: they come first and are
// small (a save writes a dozen, each under a hundred bytes, Redis 7 and Valkey 8).
inline constexpr size_t kRdbHeadBytes = 4096;

// The "used-mem" auxiliary field of an RDB file whose first bytes are `head`: bytes the server's
// allocator held when it began the save. nullopt when head is not an RDB file's, its auxiliary
// fields end (or the bytes run out) before used-mem, or the value is not a number.
std::optional<uint64_t> rdb_used_mem(std::string_view head);

}  // namespace thptrace::redis
