#include "runtime/collectives.h"

#include <cstring>

#include "common/error.h"
#include "reduce/reduce.h"
#include "tuning/select.h"

namespace rdmacoll {

namespace {
inline uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix-style mixing; any change of any field changes the hash.
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}
uint64_t hashBytes(const char* s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(s[i])) * 0x100000001b3ULL;
  return h;
}
}  // namespace

uint64_t hashDescriptor(const Descriptor& d) {
  uint64_t h = 0x5244434f4c4cULL;
  h = mix(h, d.collective);
  h = mix(h, d.seq);
  h = mix(h, d.dtype);
  h = mix(h, d.count);
  h = mix(h, d.op);
  h = mix(h, static_cast<uint64_t>(static_cast<int64_t>(d.root)));
  h = mix(h, d.nameHash);
  h = mix(h, d.algorithm);
  h = mix(h, d.segmentBytes);
  return h;
}

const char* allreduce(Communicator& c, const void* in, void* out, size_t count, DataType dtype,
                      ReduceOp op, const char* name, size_t nameLen) {
  c.beginCall();
  if (static_cast<int>(dtype) >= kNumDataTypes) throw Error("unsupported dtype");
  if (static_cast<int>(op) >= kNumReduceOps) throw Error("unsupported reduction op");
  if (op == ReduceOp::kAverage && !isFloating(dtype)) {
    throw Error(std::string("Average is not defined for integer dtype ") + dtypeName(dtype) +
                ": use op=Sum (and divide by size() yourself if you need a mean)");
  }
  const size_t E = dtypeSize(dtype), bytes = count * E;
  if (in != out && bytes > 0) {
    const char *a = static_cast<const char*>(in), *b = static_cast<const char*>(out);
    if (a < b + bytes && b < a + bytes) throw Error("allreduce: out partially overlaps the input; pass out=x for in place, or a separate array");
  }
  Call call;
  call.in = in;
  call.out = out;
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.scale = op == ReduceOp::kAverage ? 1.0 / c.size() : 1.0;
  call.elemBytes = E;
  call.seq = c.nextSeq();

  if (c.size() == 1) {
    const void* one[1] = {in};
    reduceN(dtype, op, out, one, 1, count, call.scale);
    return "local";
  }
  const algorithms::AllreduceAlgorithm& algo = tuning::selectAllreduce(c, bytes);
  Descriptor& d = call.hd.desc;
  d.collective = 1;
  d.dtype = static_cast<uint8_t>(dtype);
  d.op = static_cast<uint8_t>(op);
  d.algorithm = algo.id;
  d.root = -1;
  d.seq = call.seq;
  d.count = count;
  d.segmentBytes = c.config().segmentBytes;
  d.nameHash = name && nameLen ? hashBytes(name, nameLen) : 0;
  if (name && nameLen) std::memcpy(d.name, name, std::min(nameLen, sizeof(d.name) - 1));
  call.hd.hash = hashDescriptor(d);
  try {
    algo.run(c, call);
  } catch (const Error& e) {
    // Counters and slots are mid-call: this communicator cannot continue, and peers
    // waiting on this rank must hear why rather than time out.
    c.fail(e.what());
  }
  return algo.name;
}

}  // namespace rdmacoll
