#include "common/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rdmacoll {

namespace {

#if defined(__x86_64__)
__attribute__((target("avx2"))) void streamAvx2(char* d, const char* s, size_t bytes) {
  size_t head = std::min(bytes, (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63);  // to a cache line
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
  }
  std::memcpy(d + i, s + i, bytes - i);
  _mm_sfence();  // streamed lines are visible to other cores before whatever follows
}

bool hasAvx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

}  // namespace

void streamCopy(void* dst, const void* src, size_t bytes) {
  if (bytes >= kStreamCopyMinBytes) {
    streamStore(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void streamStore(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  if (hasAvx2()) {
    streamAvx2(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace rdmacoll
