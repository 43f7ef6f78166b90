// SPDX-License-Identifier: Apache-2.0
#pragma once
// Every file thptrace writes for the operator (the JSON report, the timeline, recorded inputs): all
// or nothing, and never through a name someone else could have prepared.

#include <string>
#include <string_view>

namespace thptrace {

// Writes content to path: into a new file of a random name in path's directory (O_EXCL, O_NOFOLLOW,
// mode 0644 less the umask), written fully and fsynced, renamed over path, then the directory
// fsynced. A symlink at path is replaced, never followed. On failure nothing is left behind (path
// keeps what it held) and *error says why in a few words (strerror and the step), to end a sentence.
bool write_file_atomically(const std::string& path, std::string_view content, std::string* error);

}  // namespace thptrace
