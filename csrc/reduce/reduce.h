// Reduction kernels: out[i] = in[0][i] op in[1][i] op ... op in[n-1][i].
//
// Contract
// - Inputs are combined left to right (in[0] first); callers pass them in rank order, so
//   every rank that reduces the same inputs gets bit-identical results.
// - Each step computes in at least float32: float16 and bfloat16 inputs are widened to
//   float32, combined, and rounded (to nearest even) once when stored.
// - Integers wrap like NumPy (two's complement for int8/int16/int32/int64, modulo 256 for
//   uint8). bool is not reducible (an error).
// - Min/Max propagate NaN: if any input element is NaN the result element is NaN.
// - `scale` != 1 multiplies the final result before it is stored (Average passes 1/size).
//   Integers: as Horovod's ScaleBuffer, the product in float64 truncated toward zero.
// - out may alias any input (in-place); inputs may not partially overlap out.
// - count == 0 is a no-op. No allocation, no locks; safe to call from any thread.
// - The loops are written so that the compiler vectorises them (see
//   benchmarks/reduce_kernels and the note in reduce.cc).
#pragma once
#include <cstddef>
#include <cstring>

#include "common/types.h"

namespace rdmacoll {

// out = in[0] op in[1] op ... op in[nin-1], then * scale. nin >= 1 (nin == 1 copies/scales).
void reduceN(DataType dtype, ReduceOp op, void* out, const void* const* in, int nin, size_t count, double scale = 1.0);

// Convenience for two inputs: out = a op b (then * scale).
inline void reduce2(DataType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t count,
                    double scale = 1.0) {
  const void* in[2] = {a, b};
  reduceN(dtype, op, out, in, 2, count, scale);
}

// A plain copy of n bytes: the algorithms copy through it, not std::memcpy, so that a
// traced run (csrc/trace/, built with RDMACOLL_TRACE) records the bytes instead.
#ifdef RDMACOLL_TRACE
void copyBytes(void* dst, const void* src, size_t n);
#else
inline void copyBytes(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }
#endif

}  // namespace rdmacoll
