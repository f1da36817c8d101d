// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): the tcp transport's handshake proves
// the job's secret with them (transport/tcp/handshake.h). Written here rather than linked:
// the core links nothing but the C++ runtime (libibverbs and CUDA load at run time).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace rdmacoll {

using Digest = std::array<uint8_t, 32>;

Digest sha256(const void* data, size_t len);
Digest hmacSha256(const void* key, size_t keyLen, const void* msg, size_t msgLen);
// Equality in time independent of where the first difference is.
bool equalDigests(const Digest& a, const Digest& b);

}  // namespace rdmacoll
