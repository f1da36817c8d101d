// Reduction kernels (the hot loop of allreduce): reduceN from reduce.h.
//
// Contract summary (see reduce.h for the full text)
// - out[i] = in[0][i] op in[1][i] op ... op in[nin-1][i], combined strictly left to right,
//   then multiplied by `scale` when scale != 1 (Average passes 1/size).
// - float16/bfloat16 are widened to float32 for every step and rounded once, to nearest
//   even, when stored. NaN stays NaN (made quiet, sign and top payload bits kept, like
//   the F16C / AVX512-BF16 instructions); Inf stays Inf; overflow rounds to Inf, as in
//   NumPy's float32 -> float16 cast. The scale multiply is done in float32 for
//   float32/float16/bfloat16 and in float64 for float64.
// - Integers wrap like NumPy (computed in the unsigned type, so no signed-overflow UB);
//   Product wraps too. scale != 1 (Average) on integers is Horovod's ScaleBuffer: the
//   wrapped result times scale in float64, truncated toward zero (a second pass over
//   out, integer kernels only). bool is never reduced (selectKernel throws).
// - Min/Max propagate NaN and otherwise follow numpy.minimum/maximum's vector loops:
//   min(a, b) = (a < b || a is NaN) ? a : b (for a == b, e.g. +0/-0, b is returned).
// - out may alias any input exactly (never partially). nin >= 1; nin == 1 copies and
//   scales. count == 0 is a no-op. No allocation, no locks, any thread.
// - The baseline and AVX2 paths give bit-identical results (checked): each element sees
//   the same IEEE operations in the same order, and FMA is never enabled, so no
//   multiply-add can be contracted. Only the payload of a NaN may differ (the compiler
//   may swap the operands of a commutative add/multiply; x86 returns the first NaN).
//
// Organisation
//   1. bit helpers and the two portable 16-bit codecs (branch-free, vectorisable)
//   2. the five operations (Average is Sum with a scale)
//   3. kernels: native types; float16/bfloat16 through a scalar codec (auto-vectorised);
//      float16/bfloat16 with AVX2 intrinsics (F16C conversions for float16)
//   4. one entry per (ISA, dtype, op), the dispatch tables, the public functions
// nin == 2 is one pass. For nin > 2 the work goes block by block (kBlockBytes of float
// or native accumulator on the stack, in L1): out is written once, each input read once,
// instead of nin-1 full passes over memory. Loops that write out are marked RC_IVDEP
// ("no loop-carried dependence"), which is exactly the aliasing contract: out equals an
// input or overlaps none, so element j is read before it is written, and the vectoriser
// can drop the runtime overlap checks it would otherwise version each loop on.
//
// Vectorisation. Every entry is compiled twice on x86-64: for the baseline (SSE2: what a
// wheel gets from -O3 without -march) and, via __attribute__((target("avx2,f16c"))), for
// AVX2; the table is chosen once at load time with __builtin_cpu_supports. Non-x86
// builds get the baseline entries only. Float16 on the baseline path uses the portable
// codec, which GCC vectorises (its selects are written as masks so that it does); on the
// AVX2 path float16 (vcvtph2ps/vcvtps2ph) and bfloat16 use the intrinsic kernel.
// Verified with GCC 12 -O3: -fopt-info-vec-optimized reports every loop that touches
// data vectorised in both entries of every (dtype, op) (16-byte vectors in the baseline,
// 32-byte in AVX2), except int64 Min/Max/Product on the baseline path (SSE2 has no
// 64-bit compare or multiply; they are vectorised on AVX2); objdump of the entries shows
// packed addps/paddd/pminub/... and ymm vaddps, vcvtph2ps/vcvtps2ph, vpackusdw.
// Exhaustive checks: the portable float16 codec equals F16C on all 2^16 / 2^32 inputs,
// the bfloat16 rounding equals vcvtneps2bf16 on every non-subnormal float32.
// Speed: benchmarks/reduce_kernels.py.
// Test-only: -DRDMACOLL_REDUCE_GENERIC_ONLY compiles out the AVX2 path.

#include "reduce/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "common/error.h"

#if defined(__x86_64__) && !defined(RDMACOLL_REDUCE_GENERIC_ONLY)
#define RC_HAVE_AVX2_PATH 1
#include <immintrin.h>
#define RC_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#else
#define RC_HAVE_AVX2_PATH 0
#endif

#define RC_INLINE inline __attribute__((always_inline))

// "No loop-carried dependence": lets the vectoriser skip runtime alias checks. True for
// every loop here because out aliases an input either exactly or not at all.
#if defined(__clang__)
#define RC_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define RC_IVDEP _Pragma("GCC ivdep")
#else
#define RC_IVDEP
#endif

namespace rdmacoll {
namespace {

// Accumulator block for nin > 2: small enough to stay in L1 next to the input streams,
// large enough to amortise the per-block loop overhead.
constexpr size_t kBlockBytes = 8192;

// ---------------------------------------------------------------------------------------
// 1. Bit helpers and 16-bit codecs
// ---------------------------------------------------------------------------------------

RC_INLINE uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
RC_INLINE float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// c ? a : b as mask arithmetic. With ?: GCC sinks the float ops of the unused arm into a
// branch, then refuses to if-convert it (-ftrapping-math) and the loop stays scalar.
RC_INLINE uint32_t selectBits(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - uint32_t(c);
  return (a & m) | (b & ~m);
}

// bfloat16: the top half of a float32.
struct BF16Codec {
  using Stored = uint16_t;
  using Acc = float;
  static RC_INLINE float load(uint16_t h) { return floatOf(uint32_t(h) << 16); }
  static RC_INLINE uint16_t store(float f) {
    const uint32_t x = bitsOf(f);
    // Round to nearest even: add 0x7FFF plus the lowest kept bit; a carry into the
    // exponent is the correct result (the largest finite values round up to Inf).
    // NaN: no rounding (it could carry into Inf or the sign); keep sign and top payload
    // bits and set the quiet bit. Signed compare on the sign-cleared value: one packed
    // compare on SSE2; masks instead of ?: so the select happens on 32-bit lanes.
    const uint32_t nan = 0u - uint32_t(int32_t(x & 0x7FFFFFFFu) > int32_t(0x7F800000));
    const uint32_t bias = (0x7FFFu + ((x >> 16) & 1u)) & ~nan;
    return uint16_t(((x + bias) >> 16) | (nan & 0x0040u));
  }
};

// IEEE binary16, portable and branch-free. Bit-identical to F16C (vcvtph2ps / vcvtps2ph
// with round-to-nearest-even), checked exhaustively over all 2^16 and 2^32 inputs.
struct F16SoftCodec {
  using Stored = uint16_t;
  using Acc = float;
  // After M. Dukhan's FP16 library: normal halves are rebased by exponent and rescaled
  // by an exact power of two; subnormal halves go through a magic-number subtraction.
  static RC_INLINE float load(uint16_t h) {
    const uint32_t w = uint32_t(h) << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const float normal = floatOf((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    const float subnormal = floatOf((two_w >> 17) | (126u << 23)) - 0.5f;
    const uint32_t mag = selectBits((w & 0x7C000000u) == 0, bitsOf(subnormal), bitsOf(normal));
    return floatOf(sign | mag);
  }
  // After F. Giesen's float_to_half_fast3_rtne, plus NaN payloads as in vcvtps2ph.
  static RC_INLINE uint16_t store(float f) {
    const uint32_t x = bitsOf(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t a = x & 0x7FFFFFFFu;
    // Result subnormal or zero (|f| < 2^-14): adding 0.5f puts the ulp of 0.5 (2^-24,
    // the half subnormal step) at the bottom of the mantissa, so the FP adder rounds to
    // nearest even for us. A lone add: nothing can be contracted into an FMA.
    const uint32_t sub = bitsOf(floatOf(a) + 0.5f) - 0x3F000000u;
    // Result normal: rebias the exponent by -112, round to nearest even on bit 13; a
    // carry out of the mantissa (up to Inf at >= 65520) is the correct result.
    const uint32_t nrm = (a + 0xC8000FFFu + ((a >> 13) & 1u)) >> 13;
    // |f| >= 65536: Inf, or NaN with quiet bit set, sign and top payload bits kept.
    // (Signed compares: a < 2^31, and SSE2 has no unsigned packed compare.)
    const int32_t sa = int32_t(a);
    const uint32_t big = selectBits(sa > 0x7F800000, 0x7E00u | ((a >> 13) & 0x3FFu), 0x7C00u);
    const uint32_t mag = selectBits(sa >= 0x47800000, big, selectBits(sa < 0x38800000, sub, nrm));
    return uint16_t(sign | mag);
  }
};

// ---------------------------------------------------------------------------------------
// 2. Operations. Integers go through the unsigned type (wrap-around without UB).
// ---------------------------------------------------------------------------------------

template <class T>
using Wide =
    std::conditional_t<std::is_integral<T>::value && (sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

struct OpSum {
  template <class T>
  static RC_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral<T>::value) {
      return T(Wide<T>(a) + Wide<T>(b));
    } else {
      return a + b;
    }
  }
};

struct OpProduct {
  template <class T>
  static RC_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral<T>::value) {
      return T(Wide<T>(a) * Wide<T>(b));
    } else {
      return a * b;
    }
  }
};

// numpy.minimum / numpy.maximum (their vector loops): NaN in either operand wins.
struct OpMin {
  template <class T>
  static RC_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral<T>::value) {
      return a < b ? a : b;
    } else {
      return (a < b || a != a) ? a : b;
    }
  }
};

struct OpMax {
  template <class T>
  static RC_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral<T>::value) {
      return a > b ? a : b;
    } else {
      return (a > b || a != a) ? a : b;
    }
  }
};

template <bool kScale, class T>
RC_INLINE T finish(T v, T s) {
  if constexpr (kScale) {
    return v * s;
  } else {
    return v;
  }
}

// ---------------------------------------------------------------------------------------
// 3. Kernels (always inlined into the per-ISA entries, which decide the instruction set)
// ---------------------------------------------------------------------------------------

// Every dtype through one loop nest: Codec::load widens a stored element to the type the
// step computes in (Codec::Acc), Codec::store rounds back. float32, float64 and the
// integers use the identity codec (computed in the storage type); float16/bfloat16 on
// the baseline path (and off x86) widen to float32. Fused widen, combine, round, store
// in one auto-vectorised loop; for nin > 2, blocks of accumulator in L1.
template <class T>
struct NativeCodec {
  using Stored = T;
  using Acc = T;
  static RC_INLINE T load(T v) { return v; }
  static RC_INLINE T store(T v) { return v; }
};

template <class Codec, class Op, bool kScale>
RC_INLINE void codecReduce(typename Codec::Stored* out, const typename Codec::Stored* const* in, int nin, size_t count,
                           typename Codec::Acc s) {
  using S = typename Codec::Stored;
  using A = typename Codec::Acc;
  if (nin == 1) {
    const S* a = in[0];
    if constexpr (!kScale) {
      if (out != a) std::memcpy(out, a, count * sizeof(S));
    } else {
      RC_IVDEP
      for (size_t j = 0; j < count; ++j) out[j] = Codec::store(Codec::load(a[j]) * s);
    }
    return;
  }
  if (nin == 2) {
    const S* a = in[0];
    const S* b = in[1];
    RC_IVDEP
    for (size_t j = 0; j < count; ++j) {
      out[j] = Codec::store(finish<kScale>(Op::apply(Codec::load(a[j]), Codec::load(b[j])), s));
    }
    return;
  }
  constexpr size_t kBlk = kBlockBytes / sizeof(A);
  alignas(64) A acc[kBlk];
  for (size_t base = 0; base < count; base += kBlk) {
    const size_t n = std::min(kBlk, count - base);
    const S* a = in[0] + base;
    const S* b = in[1] + base;
    for (size_t j = 0; j < n; ++j) acc[j] = Op::apply(Codec::load(a[j]), Codec::load(b[j]));
    for (int k = 2; k < nin - 1; ++k) {
      const S* c = in[k] + base;
      for (size_t j = 0; j < n; ++j) acc[j] = Op::apply(acc[j], Codec::load(c[j]));
    }
    const S* c = in[nin - 1] + base;
    S* o = out + base;
    RC_IVDEP
    for (size_t j = 0; j < n; ++j) {
      o[j] = Codec::store(finish<kScale>(Op::apply(acc[j], Codec::load(c[j])), s));
    }
  }
}

#if RC_HAVE_AVX2_PATH
// float16 and bfloat16 on the AVX2 path, written with intrinsics: GCC does not vectorise
// the scalar F16C intrinsics at all, and for bfloat16 it widens with zero-extend + shift
// and packs with an extra lane permute and a separately packed NaN mask (about 1.7x the
// time of the code below). Same structure as codecReduce (fused widen, combine, round,
// store; blocks of accumulator for nin > 2), 16 elements per step; the scalar tails
// give the same bits as the vector body, so results do not depend on alignment or length.

struct V16 {  // 16 float32 lanes, in the codec's lane order (see BF16Vec)
  __m256 lo, hi;
};

// Op::apply lane by lane: minps/maxps return their second operand on NaN or equality,
// then a NaN in the first operand is blended back in.
RC_TARGET_AVX2 RC_INLINE __m256 vecApply(OpSum, __m256 a, __m256 b) { return _mm256_add_ps(a, b); }
RC_TARGET_AVX2 RC_INLINE __m256 vecApply(OpProduct, __m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
RC_TARGET_AVX2 RC_INLINE __m256 vecApply(OpMin, __m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
RC_TARGET_AVX2 RC_INLINE __m256 vecApply(OpMax, __m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
template <class Op>
RC_TARGET_AVX2 RC_INLINE V16 vecApply(V16 a, V16 b) {
  return {vecApply(Op{}, a.lo, b.lo), vecApply(Op{}, a.hi, b.hi)};
}
template <bool kScale>
RC_TARGET_AVX2 RC_INLINE V16 vecFinish(V16 v, __m256 s) {
  if constexpr (kScale) {
    return {_mm256_mul_ps(v.lo, s), _mm256_mul_ps(v.hi, s)};
  } else {
    return v;
  }
}
RC_TARGET_AVX2 RC_INLINE V16 accLoad(const float* p) { return {_mm256_load_ps(p), _mm256_load_ps(p + 8)}; }
RC_TARGET_AVX2 RC_INLINE void accStore(float* p, V16 v) {
  _mm256_store_ps(p, v.lo);
  _mm256_store_ps(p + 8, v.hi);
}

// float16 through F16C (vcvtph2ps; vcvtps2ph with round-to-nearest-even).
struct F16CVec {
  static RC_TARGET_AVX2 RC_INLINE V16 load16(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static RC_TARGET_AVX2 RC_INLINE void store16(uint16_t* p, V16 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v.lo, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8), _mm256_cvtps_ph(v.hi, _MM_FROUND_TO_NEAREST_INT));
  }
  static RC_TARGET_AVX2 RC_INLINE float load1(uint16_t h) { return _cvtsh_ss(h); }
  static RC_TARGET_AVX2 RC_INLINE uint16_t store1(float f) { return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }
};

// bfloat16: interleaving with zero puts each value in the top half of a 32-bit lane
// (lo = elements 0-3 and 8-11, hi = 4-7 and 12-15); packus_epi32 undoes exactly that
// order, so no cross-lane permute is needed. Rounding as BF16Codec::store.
struct BF16Vec {
  static RC_TARGET_AVX2 RC_INLINE V16 load16(const uint16_t* p) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i z = _mm256_setzero_si256();
    return {_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, v)), _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, v))};
  }
  static RC_TARGET_AVX2 RC_INLINE __m256i round8(__m256 f) {
    const __m256i x = _mm256_castps_si256(f);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i bias = _mm256_andnot_si256(nan, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
    return _mm256_or_si256(r, _mm256_and_si256(nan, _mm256_set1_epi32(0x0040)));
  }
  static RC_TARGET_AVX2 RC_INLINE void store16(uint16_t* p, V16 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_packus_epi32(round8(v.lo), round8(v.hi)));
  }
  static RC_TARGET_AVX2 RC_INLINE float load1(uint16_t h) { return BF16Codec::load(h); }
  static RC_TARGET_AVX2 RC_INLINE uint16_t store1(float f) { return BF16Codec::store(f); }
};

// Not always_inline: it is called from kernelBody, which has no target attribute itself.
template <class V, class Op, bool kScale>
RC_TARGET_AVX2 void avx2Reduce16(uint16_t* out, const uint16_t* const* in, int nin, size_t count, float s) {
  const __m256 vs = _mm256_set1_ps(s);
  const size_t count16 = count & ~size_t(15);
  if (nin == 1) {
    const uint16_t* a = in[0];
    if constexpr (!kScale) {
      if (out != a) std::memcpy(out, a, count * sizeof(uint16_t));
    } else {
      for (size_t j = 0; j < count16; j += 16) {
        V::store16(out + j, vecFinish<true>(V::load16(a + j), vs));
      }
      for (size_t j = count16; j < count; ++j) out[j] = V::store1(V::load1(a[j]) * s);
    }
    return;
  }
  if (nin == 2) {
    const uint16_t* a = in[0];
    const uint16_t* b = in[1];
    for (size_t j = 0; j < count16; j += 16) {
      V::store16(out + j, vecFinish<kScale>(vecApply<Op>(V::load16(a + j), V::load16(b + j)), vs));
    }
    for (size_t j = count16; j < count; ++j) {
      out[j] = V::store1(finish<kScale>(Op::apply(V::load1(a[j]), V::load1(b[j])), s));
    }
    return;
  }
  constexpr size_t kBlk = kBlockBytes / sizeof(float);
  alignas(64) float acc[kBlk];
  for (size_t base = 0; base < count; base += kBlk) {
    const size_t n = std::min(kBlk, count - base);
    const size_t n16 = n & ~size_t(15);
    const uint16_t* a = in[0] + base;
    const uint16_t* b = in[1] + base;
    for (size_t j = 0; j < n16; j += 16) {
      accStore(acc + j, vecApply<Op>(V::load16(a + j), V::load16(b + j)));
    }
    for (size_t j = n16; j < n; ++j) acc[j] = Op::apply(V::load1(a[j]), V::load1(b[j]));
    for (int k = 2; k < nin - 1; ++k) {
      const uint16_t* c = in[k] + base;
      for (size_t j = 0; j < n16; j += 16) {
        accStore(acc + j, vecApply<Op>(accLoad(acc + j), V::load16(c + j)));
      }
      for (size_t j = n16; j < n; ++j) acc[j] = Op::apply(acc[j], V::load1(c[j]));
    }
    const uint16_t* c = in[nin - 1] + base;
    uint16_t* o = out + base;
    for (size_t j = 0; j < n16; j += 16) {
      V::store16(o + j, vecFinish<kScale>(vecApply<Op>(accLoad(acc + j), V::load16(c + j)), vs));
    }
    for (size_t j = n16; j < n; ++j) {
      o[j] = V::store1(finish<kScale>(Op::apply(acc[j], V::load1(c[j])), s));
    }
  }
}
#endif

// ---------------------------------------------------------------------------------------
// 4. Entries, dispatch, public functions
// ---------------------------------------------------------------------------------------

template <DataType D>
struct Storage;
template <>
struct Storage<DataType::kFloat16> {
  using type = uint16_t;
};
template <>
struct Storage<DataType::kBFloat16> {
  using type = uint16_t;
};
template <>
struct Storage<DataType::kFloat32> {
  using type = float;
};
template <>
struct Storage<DataType::kFloat64> {
  using type = double;
};
template <>
struct Storage<DataType::kInt32> {
  using type = int32_t;
};
template <>
struct Storage<DataType::kInt64> {
  using type = int64_t;
};
template <>
struct Storage<DataType::kUInt8> {
  using type = uint8_t;
};
template <>
struct Storage<DataType::kInt8> {
  using type = int8_t;
};
template <>
struct Storage<DataType::kInt16> {
  using type = int16_t;
};
template <>
struct Storage<DataType::kBool> {
  using type = uint8_t;
};  // (rejected before use)

// Horovod's ScaleBuffer for integers: T(scale * v) computed in float64, truncated toward
// zero. Out-of-range products saturate to int64 and then wrap to T (defined behaviour,
// where a plain cast would be undefined); NaN gives 0.
template <class T>
RC_INLINE T scaleInteger(T v, double s) {
  const double p = double(v) * s;
  int64_t i = 0;
  if (p >= 9223372036854775808.0) {
    i = INT64_MAX;
  } else if (p <= -9223372036854775808.0) {
    i = INT64_MIN;
  } else if (p == p) {
    i = int64_t(p);
  }
  return T(std::make_unsigned_t<T>(uint64_t(i)));
}

// One body for both ISAs; kAvx2 picks the intrinsic float16/bfloat16 kernels.
template <DataType D, class Op, bool kScale, bool kAvx2>
RC_INLINE void kernelBody(void* out, const void* const* in, int nin, size_t count, double scale) {
  using T = typename Storage<D>::type;
  T* o = static_cast<T*>(out);
  const T* const* i = reinterpret_cast<const T* const*>(in);
  if constexpr (D == DataType::kFloat16 || D == DataType::kBFloat16) {
    using Soft = std::conditional_t<D == DataType::kFloat16, F16SoftCodec, BF16Codec>;
#if RC_HAVE_AVX2_PATH
    if constexpr (kAvx2) {
      using Vec = std::conditional_t<D == DataType::kFloat16, F16CVec, BF16Vec>;
      avx2Reduce16<Vec, Op, kScale>(o, i, nin, count, float(scale));
    } else
#endif
    {
      codecReduce<Soft, Op, kScale>(o, i, nin, count, float(scale));
    }
  } else if constexpr (std::is_integral<T>::value) {
    codecReduce<NativeCodec<T>, Op, false>(o, i, nin, count, T(1));
    if constexpr (kScale) {
      for (size_t j = 0; j < count; ++j) o[j] = scaleInteger(o[j], scale);
    }
  } else {
    codecReduce<NativeCodec<T>, Op, kScale>(o, i, nin, count, T(scale));
  }
}

using KernelFn = void (*)(void* out, const void* const* in, int nin, size_t count, double scale);

// bool entries exist only to fill the table (selectKernel rejects bool): no scaled copy.
template <DataType D>
constexpr bool kScalable = D != DataType::kBool;

template <DataType D, class Op>
__attribute__((noinline)) void entryBaseline(void* out, const void* const* in, int nin, size_t count, double scale) {
  if constexpr (kScalable<D>) {
    if (scale != 1.0) return kernelBody<D, Op, true, false>(out, in, nin, count, scale);
  }
  kernelBody<D, Op, false, false>(out, in, nin, count, scale);
}

#if RC_HAVE_AVX2_PATH
template <DataType D, class Op>
RC_TARGET_AVX2
    __attribute__((noinline)) void entryAvx2(void* out, const void* const* in, int nin, size_t count, double scale) {
  if constexpr (kScalable<D>) {
    if (scale != 1.0) return kernelBody<D, Op, true, true>(out, in, nin, count, scale);
  }
  kernelBody<D, Op, false, true>(out, in, nin, count, scale);
}
#endif

// Rows follow DataType, columns follow ReduceOp (Sum, Average, Min, Max, Product);
// Average is Sum with a scale. The unsigned types past uint8 are never reduced
// (isReducible; selectKernel refuses them before reading their empty rows).
#define RC_ROW(ENTRY, D) {ENTRY<D, OpSum>, ENTRY<D, OpSum>, ENTRY<D, OpMin>, ENTRY<D, OpMax>, ENTRY<D, OpProduct>}
#define RC_MOVED_ONLY {nullptr, nullptr, nullptr, nullptr, nullptr}
#define RC_TABLE(ENTRY)                \
  {RC_ROW(ENTRY, DataType::kFloat16),  \
   RC_ROW(ENTRY, DataType::kBFloat16), \
   RC_ROW(ENTRY, DataType::kFloat32),  \
   RC_ROW(ENTRY, DataType::kFloat64),  \
   RC_ROW(ENTRY, DataType::kInt32),    \
   RC_ROW(ENTRY, DataType::kInt64),    \
   RC_ROW(ENTRY, DataType::kUInt8),    \
   RC_ROW(ENTRY, DataType::kInt8),     \
   RC_ROW(ENTRY, DataType::kInt16),    \
   RC_ROW(ENTRY, DataType::kBool),     \
   RC_MOVED_ONLY,                      \
   RC_MOVED_ONLY,                      \
   RC_MOVED_ONLY}

const KernelFn kBaselineTable[kNumDataTypes][kNumReduceOps] = RC_TABLE(entryBaseline);
#if RC_HAVE_AVX2_PATH
const KernelFn kAvx2Table[kNumDataTypes][kNumReduceOps] = RC_TABLE(entryAvx2);
#endif
#undef RC_TABLE
#undef RC_MOVED_ONLY
#undef RC_ROW

bool cpuHasAvx2F16c() {
#if RC_HAVE_AVX2_PATH
  __builtin_cpu_init();  // may run before libgcc's own constructor
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

// Chosen once at load time. A call from another translation unit's static initialiser
// that runs first sees the zero-initialised value and takes the baseline path (correct,
// and bit-identical, just not the fastest).
const bool gUseAvx2 = cpuHasAvx2F16c();

KernelFn selectKernel(DataType dtype, ReduceOp op, double scale) {
  const int d = static_cast<int>(dtype);
  const int o = static_cast<int>(op);
  RC_CHECK(d >= 0 && d < kNumDataTypes, "reduce: invalid dtype " + std::to_string(d));
  RC_CHECK(o >= 0 && o < kNumReduceOps, "reduce: invalid op " + std::to_string(o));
  RC_CHECK(isReducible(dtype), std::string("reduce: ") + dtypeName(dtype) + " cannot be reduced");
#if RC_HAVE_AVX2_PATH
  if (gUseAvx2) return kAvx2Table[d][o];
#endif
  return kBaselineTable[d][o];
}

}  // namespace

void reduceN(DataType dtype, ReduceOp op, void* out, const void* const* in, int nin, size_t count, double scale) {
  KernelFn fn = selectKernel(dtype, op, scale);
  RC_CHECK(nin >= 1, "reduce: need at least one input, got " + std::to_string(nin));
  if (count == 0) return;
  fn(out, in, nin, count, scale);
}

}  // namespace rdmacoll
