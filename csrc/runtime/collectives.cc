#include "runtime/collectives.h"

#include <cstring>
#include <exception>
#include <string>

#include "common/error.h"
#include "common/text.h"
#include "algorithms/partition.h"
#include "reduce/reduce.h"
#include "runtime/async.h"
#include "runtime/timeline.h"
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

namespace {

constexpr uint8_t kBarrierHeaders = 24;

// A forced algorithm (RDMACOLL_ALGO rules) where it can run, else the usable one the
// transport's cost model predicts cheapest (registry order breaks ties). `bytes` must be
// identical on every rank: allgather and alltoall, whose ranks contribute different
// sizes that no rank knows before the call's headers, pass one row per rank.
template <class Fn>
const algorithms::CollectiveAlgorithm<Fn>& select(Communicator& c, Collective coll, size_t bytes,
                                                  const std::vector<algorithms::CollectiveAlgorithm<Fn>>& all) {
  if (const char* forced = tuning::forcedAlgorithm(c.config(), coll, bytes)) {
    for (const auto& a : all) {
      if (std::string(forced) == a.name && a.usable(c)) return c.noteAlgorithm(a.name), a;
    }
  }
  const tuning::CostModel model = tuning::costModel(c);
  const algorithms::CollectiveAlgorithm<Fn>* best = nullptr;
  double bestCost = 0;
  for (const auto& a : all) {
    if (!a.usable(c)) continue;
    const double cost = a.cost(model, bytes, c.size());
    if (!best || cost < bestCost) best = &a, bestCost = cost;
  }
  if (best) return c.noteAlgorithm(best->name), *best;
  throw Error(std::string(collectiveName(coll)) + ": no algorithm can run on transport " + c.transportName());
}

// The call every collective starts with: sequence number, descriptor and its hash.
Call makeCall(Communicator& c, Collective coll, const void* in, void* out, size_t count,
              DataType dtype, ReduceOp op, int root, uint8_t algorithm, const char* name,
              size_t nameLen) {
  if (static_cast<int>(dtype) >= kNumDataTypes) throw Error("unsupported dtype");
  Call call;
  call.in = in;
  call.out = out;
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.scale = op == ReduceOp::kAverage ? 1.0 / c.size() : 1.0;
  call.elemBytes = dtypeSize(dtype);
  call.seq = c.nextSeq();
  Descriptor& d = call.hd.desc;
  d.collective = static_cast<uint8_t>(coll);
  d.dtype = static_cast<uint8_t>(dtype);
  d.op = static_cast<uint8_t>(op);
  d.algorithm = algorithm;
  d.root = root;
  d.seq = call.seq;
  d.count = count;
  d.segmentBytes = c.config().segmentBytes;
  d.nameHash = name && nameLen ? hashBytes(name, nameLen) : 0;
  if (name && nameLen) std::memcpy(d.name, name, std::min(nameLen, sizeof(d.name) - 1));
  call.hd.hash = hashDescriptor(d);
  c.announce(d);
  return call;
}

// The operation on the timeline (RDMACOLL_TIMELINE) for the scope's lifetime; without
// a timeline, one test of a null pointer at each end.
class OpTrace {
 public:
  OpTrace(Communicator& c, const Call& call, const char* algorithm) : t_(c.timeline()) {
    if (t_) begin(call, algorithm);
  }
  ~OpTrace() {
    if (t_) t_->endOp(std::uncaught_exceptions() > exceptions_);
  }
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

 private:
  void begin(const Call& call, const char* algorithm) {
    exceptions_ = std::uncaught_exceptions();
    const Descriptor& d = call.hd.desc;
    const Collective coll = static_cast<Collective>(d.collective);
    std::string args = "\"seq\":" + std::to_string(d.seq) + ",\"count\":" + std::to_string(d.count) +
                       ",\"dtype\":\"" + dtypeName(call.dtype) + "\",\"algorithm\":\"" + algorithm + "\"";
    const bool reduces = coll == Collective::kAllreduce || coll == Collective::kReducescatter;
    if (reduces) args += std::string(",\"op\":\"") + opName(call.op) + "\"";
    if (d.root >= 0) args += ",\"root\":" + std::to_string(d.root);
    if (d.name[0]) args += ",\"name\":" + Timeline::jsonString(printableUtf8(d.name, sizeof(d.name)));
    t_->beginOp(collectiveName(coll), reduces, d.seq, AsyncEngine::queuedSinceNs(), args);
  }
  Timeline* t_;
  int exceptions_ = 0;
};

void checkReduceOp(DataType dtype, ReduceOp op) {
  if (static_cast<int>(op) >= kNumReduceOps) throw Error("unsupported reduction op");
  if (op == ReduceOp::kAverage && !isFloating(dtype)) {
    throw Error(std::string("Average is not defined for integer dtype ") + dtypeName(dtype) +
                ": use op=Sum (and divide by size() yourself if you need a mean)");
  }
}

// Runs an algorithm. An error inside it leaves counters and slots mid-call: this
// communicator cannot continue, and peers waiting on this rank must hear why rather
// than time out.
template <class F>
auto guarded(Communicator& c, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    c.fail(e.what());
  }
}

}  // namespace

const char* allreduce(Communicator& c, const void* in, void* out, size_t count, DataType dtype,
                      ReduceOp op, const char* name, size_t nameLen) {
  c.beginCall();
  if (static_cast<int>(dtype) >= kNumDataTypes) throw Error("unsupported dtype");
  checkReduceOp(dtype, op);
  const size_t bytes = count * dtypeSize(dtype);
  if (in != out && bytes > 0) {
    const char *a = static_cast<const char*>(in), *b = static_cast<const char*>(out);
    if (a < b + bytes && b < a + bytes) {
      throw Error("allreduce: out partially overlaps the input; pass out=x for in place, or a separate array");
    }
  }
  if (c.size() == 1) {
    c.nextSeq();
    c.noteAlgorithm("local");
    const void* one[1] = {in};
    reduceN(dtype, op, out, one, 1, count, 1.0);
    return "local";
  }
  const algorithms::AllreduceAlgorithm& algo = tuning::selectAllreduce(c, bytes);
  c.noteAlgorithm(algo.name);
  const Call call = makeCall(c, Collective::kAllreduce, in, out, count, dtype, op, -1, algo.id, name, nameLen);
  OpTrace trace(c, call, algo.name);
  guarded(c, [&] { algo.run(c, call); });
  return algo.name;
}


size_t reducescatterRows(size_t rows, int size, int rank) { return ring::chunkCount(rows, size, rank); }

size_t allgather(Communicator& c, const void* in, size_t rows, size_t rowElems, DataType dtype,
                 const char* name, size_t nameLen, algorithms::Output& out) {
  c.beginCall();
  const size_t bytes = rows * rowElems * dtypeSize(dtype);
  if (c.size() == 1) {
    c.nextSeq();
    c.noteAlgorithm("local");
    std::memcpy(out.allocate(bytes), in, bytes);
    return rows;
  }
  const auto& algo = select(c, Collective::kAllgather, rowElems * dtypeSize(dtype) * c.size(),
                            algorithms::allgatherAlgorithms());
  Call call = makeCall(c, Collective::kAllgather, in, nullptr, rowElems, dtype, ReduceOp::kSum, -1, algo.id,
                       name, nameLen);
  OpTrace trace(c, call, algo.name);
  return guarded(c, [&] { return algo.run(c, call, rows, out); });
}

void broadcast(Communicator& c, const void* in, void* out, size_t count, DataType dtype, int root,
               const char* name, size_t nameLen) {
  c.beginCall();
  if (root < 0 || root >= c.size()) {
    throw Error("broadcast: root_rank " + std::to_string(root) + " is not a rank of this job (size " +
                std::to_string(c.size()) + ")");
  }
  const size_t bytes = count * dtypeSize(dtype);
  if (c.size() == 1) {
    c.nextSeq();
    c.noteAlgorithm("local");
    if (in != out) std::memcpy(out, in, bytes);
    return;
  }
  const auto& algo = select(c, Collective::kBroadcast, bytes, algorithms::broadcastAlgorithms());
  Call call = makeCall(c, Collective::kBroadcast, in, out, count, dtype, ReduceOp::kSum, root, algo.id, name,
                       nameLen);
  OpTrace trace(c, call, algo.name);
  guarded(c, [&] { algo.run(c, call, root); });
}

void reducescatter(Communicator& c, const void* in, void* out, size_t count, size_t rowElems,
                   DataType dtype, ReduceOp op, const char* name, size_t nameLen) {
  c.beginCall();
  checkReduceOp(dtype, op);
  if (c.size() == 1) {
    c.nextSeq();
    c.noteAlgorithm("local");
    const void* one[1] = {in};
    reduceN(dtype, op, out, one, 1, count, 1.0);
    return;
  }
  const auto& algo = select(c, Collective::kReducescatter, count * dtypeSize(dtype), algorithms::reducescatterAlgorithms());
  Call call = makeCall(c, Collective::kReducescatter, in, out, count, dtype, op, -1, algo.id, name, nameLen);
  OpTrace trace(c, call, algo.name);
  guarded(c, [&] { algo.run(c, call, rowElems); });
}

size_t alltoall(Communicator& c, const void* in, size_t rowElems, const uint64_t* splits,
                uint64_t* received, DataType dtype, const char* name, size_t nameLen,
                algorithms::Output& out) {
  c.beginCall();
  const size_t rowBytes = rowElems * dtypeSize(dtype);
  if (c.size() == 1) {
    c.nextSeq();
    c.noteAlgorithm("local");
    received[0] = splits[0];
    std::memcpy(out.allocate(splits[0] * rowBytes), in, splits[0] * rowBytes);
    return splits[0];
  }
  const auto& algo = select(c, Collective::kAlltoall, rowBytes * c.size(), algorithms::alltoallAlgorithms());
  Call call = makeCall(c, Collective::kAlltoall, in, nullptr, rowElems, dtype, ReduceOp::kSum, -1, algo.id, name,
                       nameLen);
  OpTrace trace(c, call, algo.name);
  return guarded(c, [&] { return algo.run(c, call, splits, received, out); });
}

void barrier(Communicator& c) {
  c.beginCall();
  Call call = makeCall(c, Collective::kBarrier, nullptr, nullptr, 0, DataType::kUInt8, ReduceOp::kSum,
                       -1, kBarrierHeaders, nullptr, 0);
  if (c.size() == 1) return;
  OpTrace trace(c, call, "headers");
  guarded(c, [&] { algorithms::barrierHeaders(c, call); });
}

}  // namespace rdmacoll
