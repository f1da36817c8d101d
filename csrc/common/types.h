// Data types and reduction operations understood by the core.
// The numeric values are exported to Python by the binding (never copied by hand).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace rdmacoll {

enum class DataType : uint8_t {
  kFloat16 = 0,
  kBFloat16 = 1,
  kFloat32 = 2,
  kFloat64 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUInt8 = 6,
  kInt8 = 7,
  kInt16 = 8,
  kBool = 9,  // one byte, 0 or 1; moved (allgather, broadcast, alltoall), never reduced
  // Moved, never reduced (as bool): what Horovod's TensorFlow ops move (uint16), and the
  // other unsigned widths NumPy has, so that no caller reinterprets them as signed (a
  // rank's uint16 against another's int16 stays a mismatch)
  kUInt16 = 10,
  kUInt32 = 11,
  kUInt64 = 12,
};
constexpr int kNumDataTypes = 13;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kAverage = 1,  // Sum, then scaled by 1/size in the last reduction step (integers: truncated)
  kMin = 2,
  kMax = 3,
  kProduct = 4,
};
constexpr int kNumReduceOps = 5;

// Collectives, as they appear in descriptors (and so in mismatch messages).
enum class Collective : uint8_t {
  kAllreduce = 1,
  kAllgather = 2,
  kBroadcast = 3,
  kReducescatter = 4,
  kAlltoall = 5,
  kBarrier = 6,
};
constexpr Collective kCollectives[] = {Collective::kAllreduce,     Collective::kAllgather, Collective::kBroadcast,
                                       Collective::kReducescatter, Collective::kAlltoall,  Collective::kBarrier};
const char* collectiveName(Collective c);
// The collective named `name` (any case); false when there is none.
bool collectiveFromName(const std::string& name, Collective* out);

size_t dtypeSize(DataType t);
const char* dtypeName(DataType t);
const char* opName(ReduceOp op);
bool isFloating(DataType t);
// Whether reductions (allreduce, reducescatter) are defined for t: every dtype but bool.
bool isReducible(DataType t);

}  // namespace rdmacoll
