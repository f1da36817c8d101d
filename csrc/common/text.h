// Text from outside (names cut at a fixed length, bytes a peer wrote) made safe for
// messages: an exception text becomes a Python str, which must be valid UTF-8.
#pragma once
#include <cstddef>
#include <string>

namespace rdmacoll {

// s[0..n) with every invalid or truncated UTF-8 sequence and every control character
// replaced by U+FFFD; stops at the first NUL.
std::string printableUtf8(const char* s, size_t n);

}  // namespace rdmacoll
