#include "runtime/group.h"

#include <cstring>
#include <exception>
#include <string>

#include "algorithms/partition.h"
#include "comm/primitives.h"
#include "common/error.h"
#include "common/text.h"
#include "common/timeline.h"
#include "reduce/reduce.h"
#include "tuning/select.h"

namespace rdmacoll {

namespace {

void checkReduceOp(DataType dtype, ReduceOp op) {
  if (static_cast<int>(op) >= kNumReduceOps) throw ArgumentError("unsupported reduction op");
  // (Average on integers is Horovod's: the sum times 1/size in float64, truncated.)
  if (!isReducible(dtype)) {
    throw ArgumentError(std::string(dtypeName(dtype)) +
                        " cannot be reduced (allreduce, reducescatter); it travels by allgather, "
                        "broadcast and alltoall");
  }
}

// The bytes selection sees: identical on every rank. allgather and alltoall ranks
// contribute different row counts, which no rank knows before the call's headers: one
// row per rank.
size_t selectionBytes(const Request& r, int size) {
  const size_t e = dtypeSize(r.dtype);
  switch (r.collective) {
    case Collective::kAllgather:
    case Collective::kAlltoall:
      return r.count * e * size;
    case Collective::kBarrier:
      return 0;
    default:
      return r.count * e;
  }
}

uint64_t hashBytes(const char* s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(s[i])) * 0x100000001b3ULL;
  return h;
}

// The call every collective starts with: sequence number, descriptor and its hash.
Call describe(Communicator& c, const Request& r, const algorithms::Algorithm& a) {
  Call call;
  call.in = r.in;
  call.out = r.out;
  call.count = r.count;
  call.dtype = r.dtype;
  call.op = r.op;
  call.scale = r.op == ReduceOp::kAverage ? 1.0 / c.size() : 1.0;
  call.elemBytes = dtypeSize(r.dtype);
  call.seq = c.nextSeq();
  call.root = r.root;
  call.rows = r.rows;
  call.rowElems = r.rowElems;
  call.splits = r.splits;
  call.received = r.received;
  call.result = r.result;
  Descriptor& d = call.hd.desc;
  d.collective = static_cast<uint8_t>(r.collective);
  d.dtype = static_cast<uint8_t>(r.dtype);
  d.op = static_cast<uint8_t>(r.op);
  d.algorithm = a.id;
  d.root = r.root;
  d.seq = call.seq;
  d.count = r.count;
  d.segmentBytes = c.protocol().segmentBytes;
  if (r.like) {
    d.nameHash = r.like->nameHash;
    d.shapeHash = r.like->shapeHash;
    std::memcpy(d.name, r.like->name, sizeof(d.name));
  } else {
    d.nameHash = r.name && r.nameLen ? static_cast<uint32_t>(hashBytes(r.name, r.nameLen)) : 0;
    d.shapeHash = r.shapeHash;
    if (r.name && r.nameLen) std::memcpy(d.name, r.name, std::min(r.nameLen, sizeof(d.name) - 1));
  }
  call.shape = r.shape;
  call.hd.hash = hashDescriptor(d);
  c.announce(call.hd);
  return call;
}

// The operation on the timeline (RDMACOLL_TIMELINE) for the scope's lifetime; without a
// timeline, one test of a null pointer at each end.
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
    std::string args = "\"seq\":" + std::to_string(d.seq) + ",\"count\":" + std::to_string(d.count) + ",\"dtype\":\"" +
                       dtypeName(call.dtype) + "\",\"algorithm\":\"" + algorithm + "\"";
    const bool reduces = coll == Collective::kAllreduce || coll == Collective::kReducescatter;
    if (reduces) args += std::string(",\"op\":\"") + opName(call.op) + "\"";
    if (d.root >= 0) args += ",\"root\":" + std::to_string(d.root);
    if (d.name[0]) args += ",\"name\":" + Timeline::jsonString(printableUtf8(d.name, sizeof(d.name)));
    t_->beginOp(collectiveName(coll), reduces, d.seq, AsyncEngine::queuedSinceNs(), args);
  }
  Timeline* t_;
  int exceptions_ = 0;
};

// One rank: the result is the input (copied where it goes elsewhere).
size_t runLocal(Communicator& c, const Request& r) {
  c.nextSeq();
  const size_t e = dtypeSize(r.dtype);
  switch (r.collective) {
    case Collective::kAllreduce:
    case Collective::kReducescatter: {
      const void* one[1] = {r.in};
      reduceN(r.dtype, r.op, r.out, one, 1, r.count, 1.0);
      return 0;
    }
    case Collective::kBroadcast:
      if (r.in != r.out) std::memcpy(r.out, r.in, r.count * e);
      return 0;
    case Collective::kAllgather:
      std::memcpy(r.result->allocate(r.rows * r.count * e), r.in, r.rows * r.count * e);
      return r.rows;
    case Collective::kAlltoall:
      r.received[0] = r.splits[0];
      std::memcpy(r.result->allocate(r.splits[0] * r.count * e), r.in, r.splits[0] * r.count * e);
      return r.splits[0];
    case Collective::kBarrier:
      return 0;
  }
  return 0;
}

}  // namespace

void validate(const Request& r, int size) {
  if (static_cast<int>(r.dtype) >= kNumDataTypes) throw ArgumentError("unsupported dtype");
  switch (r.collective) {
    case Collective::kAllreduce: {
      checkReduceOp(r.dtype, r.op);
      const size_t bytes = r.count * dtypeSize(r.dtype);
      const char *a = static_cast<const char*>(r.in), *b = static_cast<const char*>(r.out);
      if (a != b && bytes > 0 && a < b + bytes && b < a + bytes) {
        throw ArgumentError(
            "allreduce: out partially overlaps the input; pass out=x for in place, or a separate "
            "array");
      }
      break;
    }
    case Collective::kReducescatter:
      checkReduceOp(r.dtype, r.op);
      break;
    case Collective::kBroadcast:
      if (r.root < 0 || r.root >= size) {
        throw ArgumentError("broadcast: root_rank " + std::to_string(r.root) + " is not a rank of this job (size " +
                            std::to_string(size) + ")");
      }
      break;
    case Collective::kAlltoall: {
      uint64_t total = 0;
      for (int q = 0; q < size; ++q) total += r.splits[q];
      if (total != r.rows) {
        throw ArgumentError("alltoall: splits sum to " + std::to_string(total) + " but the first dimension is " +
                            std::to_string(r.rows));
      }
      break;
    }
    default:
      break;
  }
}

size_t reducescatterRows(size_t rows, int size, int rank) { return ring::chunkCount(rows, size, rank); }

Group::Group(std::unique_ptr<Communicator> comm, tuning::Policy policy)
    : comm_(std::move(comm)), policy_(std::move(policy)) {
  engine_->setHooks(comm_->hooks());
}

Group::Group(std::shared_ptr<AsyncEngine> engine, tuning::Policy policy)
    : policy_(std::move(policy)), engine_(std::move(engine)) {}

// The communicator goes in its turn: groups sharing the connections may be running.
Group::~Group() {
  engine_->runInline([&] { comm_.reset(); });
}

void Group::connect(const std::vector<transport::Bytes>& addresses, const transport::Bytes& secret) {
  engine_->runInline([&] { comm_->connect(addresses, secret); });
  costs_ = tuning::costsFor(policy_, *comm_);
  base_ = algorithms::Situation::of(*comm_, Collective::kAllreduce, 0);
  base_.countCrossings(comm_->job().hostOf, costs_.leafRanks);
}

std::unique_ptr<Group> Group::split(const std::vector<int>& members) {
  std::unique_ptr<Group> g(new Group(engine_, policy_));
  engine_->runInline([&] { g->comm_ = comm_->split(members); });
  return g;
}

algorithms::Situation Group::situation(Collective collective, size_t bytes) const {
  algorithms::Situation s = base_;
  s.collective = collective;
  s.bytes = bytes;
  return s;
}

const algorithms::Algorithm& Group::selected(Collective collective, size_t bytes) const {
  return tuning::select(policy_, costs_, situation(collective, bytes));
}

namespace {

// One synchronous call inside Group::run, counted while it is (group.h): entering after
// another thread, either call unnamed, is `crowded`. One word holds both counts (calls
// inside in the low 32 bits, unnamed ones above), so that entering and leaving are one
// read-modify-write each: two threads entering together always see each other, and a call
// leaving is never seen half gone.
class Inside {
 public:
  Inside(std::atomic<uint64_t>& word, bool named) : word_(word), delta_(named ? 1 : 1 + kUnnamed) {
    const uint64_t before = word_.fetch_add(delta_, std::memory_order_acq_rel);
    crowded_ = (before & 0xffffffffu) != 0 && (!named || before >= kUnnamed);
  }
  ~Inside() { word_.fetch_sub(delta_, std::memory_order_acq_rel); }
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;
  bool crowded() const { return crowded_; }

 private:
  static constexpr uint64_t kUnnamed = uint64_t(1) << 32;
  std::atomic<uint64_t>& word_;
  const uint64_t delta_;
  bool crowded_ = false;
};

}  // namespace

size_t Group::run(const Request& r) {
  Inside inside(inside_, r.nameLen > 0);
  if (inside.crowded()) {
    const std::string message =
        std::string(collectiveName(r.collective)) + (r.nameLen ? " '" + std::string(r.name, r.nameLen) + "'" : "") +
        " was called on a thread while another thread was inside a synchronous call on the same communicator, "
        "and at least one of the two calls is unnamed: the ranks may run such calls in different orders and pair "
        "different tensors. Give both calls names (name=...; calls of the same name must be interchangeable), "
        "or make the threads take turns; this communicator is closed on every rank";
    comm_->poison(message);  // (fail() names this rank)
    throw Error(message);
  }
  size_t rows = 0;
  engine_->runInline([&] {
    rows = execute(r);
    // A thread that came in meanwhile, here or at a peer (whose abort may have landed as
    // this call ended): this call's result cannot be trusted either
    comm_->checkPoison();
    comm_->checkAbortWord();
  });
  return rows;
}

AsyncEngine::Handle Group::submit(const Request& r, std::shared_ptr<void> owner, size_t* rows) {
  validate(r, comm_->size());
  return engine_->submit([this, r, owner = std::move(owner), rows] {
    const size_t n = execute(r);
    if (rows) *rows = n;
  });
}

void Group::logChoice(const algorithms::Situation& s, const algorithms::Algorithm& a) {
  int width = 0;
  for (size_t b = s.bytes; b; b >>= 1) ++width;
  uint64_t& seen = logged_[static_cast<int>(s.collective) & 7];
  if (seen & (uint64_t(1) << width)) return;
  seen |= uint64_t(1) << width;
  const size_t lo = width ? size_t(1) << (width - 1) : 0;
  comm_->log().write(LogLevel::kDebug, std::string(collectiveName(s.collective)) + " of " + std::to_string(s.bytes) +
                                           " B (first call in [" + std::to_string(lo) + ", " +
                                           std::to_string(width ? lo * 2 : 1) + ") B): " + a.name + " (" +
                                           tuning::explain(policy_, costs_, s, a) + ")");
}

uint64_t Group::markJoined(uint64_t episode) {
  uint64_t seq = 0;
  engine_->runInline([&] { seq = comm_->markJoined(episode); });
  return seq;
}

bool Group::awaitCall(uint64_t episode, HashedDescriptor* theirs) {
  bool arrived = false;
  engine_->runInline([&] {
    try {
      arrived = comm_->awaitCall(episode, theirs);
    } catch (const Error& e) {
      comm_->fail(e.what());
    }
  });
  return arrived;
}

size_t Group::execute(const Request& r) {
  Communicator& c = *comm_;
  c.beginCall();
  validate(r, c.size());
  if (c.size() == 1) {
    last_.store("local", std::memory_order_relaxed);
    return runLocal(c, r);
  }
  const algorithms::Situation s = situation(r.collective, selectionBytes(r, c.size()));
  const algorithms::Algorithm& a = tuning::select(policy_, costs_, s);
  last_.store(a.name, std::memory_order_relaxed);
  if (c.log().enabled(LogLevel::kDebug)) logChoice(s, a);
  Call call = describe(c, r, a);
  OpTrace trace(c, call, a.name);
  try {
    a.run(c, call);
    prim::finishWrites(c);  // the call's sources (user memory, the pool's, staging) are free
  } catch (const Error& e) {
    c.fail(e.what());  // aborts the peers (unless they already did), rethrows
  }
  // A continuation renamed what ran (prim::continueAs).
  if (call.hd.desc.algorithm != a.id)
    last_.store(algorithms::byId(call.hd.desc.algorithm).name, std::memory_order_relaxed);
  return call.resultRows;
}

}  // namespace rdmacoll
