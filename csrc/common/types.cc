#include "common/types.h"

#include <cctype>
#include <cstring>

#include "common/error.h"

namespace rdmacoll {

size_t dtypeSize(DataType t) {
  switch (t) {
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kInt16:
    case DataType::kUInt16:
      return 2;
    case DataType::kUInt32:
      return 4;
    case DataType::kUInt64:
      return 8;
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
  }
  return 0;
}

const char* dtypeName(DataType t) {
  static const char* names[] = {"float16", "bfloat16", "float32", "float64", "int32",  "int64", "uint8",
                                "int8",    "int16",    "bool",    "uint16",  "uint32", "uint64"};
  int i = static_cast<int>(t);
  return i < kNumDataTypes ? names[i] : "invalid";
}

const char* opName(ReduceOp op) {
  static const char* names[] = {"Sum", "Average", "Min", "Max", "Product"};
  int i = static_cast<int>(op);
  return i < kNumReduceOps ? names[i] : "invalid";
}

const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kReducescatter:
      return "reducescatter";
    case Collective::kAlltoall:
      return "alltoall";
    case Collective::kBarrier:
      return "barrier";
  }
  return "?";
}

bool collectiveFromName(const std::string& name, Collective* out) {
  std::string lower = name;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (Collective c : kCollectives) {
    if (lower == collectiveName(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

bool isFloating(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64;
}

bool isReducible(DataType t) { return static_cast<int>(t) < static_cast<int>(DataType::kBool); }

std::string sysError(const std::string& what, int err) { return what + ": " + std::strerror(err); }

}  // namespace rdmacoll
