// streamCopy: a copy into memory that the next reader does not find in this core's cache
// anyway (a gradient moving into its bucket, which a peer or the progress thread reduces
// milliseconds later, after other layers' compute has gone through the cache).
//
// From kStreamCopyMinBytes on, with non-temporal stores where the CPU has AVX2: they skip
// loading every destination line before writing it (a plain copy reads the destination,
// then writes it back: two reads and one write per byte instead of one and one). Measured
// here (2-core EPYC VM): 8 x 16 MiB from a source in cache, 5.5 ms against memcpy's 7.6-9.7.
// Below it, or without AVX2, memcpy. dst and src must not overlap. No allocation, no
// locks; any thread.
#pragma once
#include <cstddef>

namespace rdmacoll {

constexpr size_t kStreamCopyMinBytes = 1 << 20;

void streamCopy(void* dst, const void* src, size_t bytes);

// The same non-temporal stores at any size (memcpy without AVX2): for a copy into lines
// that another core holds, where taking each line from it costs more than the reader's
// miss (the same-host transport's writes into a peer's mapping, by measurement).
void streamStore(void* dst, const void* src, size_t bytes);

}  // namespace rdmacoll
