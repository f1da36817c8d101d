// The traced Communicator (trace/comm/communicator.h), the recorder, the recording
// kernels and the pool: every buffer of a trace is library memory that is never touched.
#include "comm/communicator.h"

#include <stdexcept>

#include "reduce/reduce.h"
#include "trace/recorder.h"

namespace rdmacoll {

namespace {
// Base of the addresses a trace hands out (staging, pool blocks): never dereferenced.
char* fake(uint64_t offset) { return reinterpret_cast<char*>((uintptr_t(1) << 45) + offset); }
thread_local trace::Recorder* recording = nullptr;
}  // namespace

Communicator::Communicator(int rank, int size, const Protocol& protocol, const std::vector<int>& hostOf, bool readable,
                           bool mappable)
    : rank_(rank),
      size_(size),
      protocol_(protocol),
      topology_(schedule::hierarchy(hostOf.empty() ? std::vector<int>(size, 0) : hostOf, rank)),
      readable_(readable),
      mappable_(mappable),
      peers_(size),
      pool_(std::make_shared<MemoryPool>(nullptr, 0)) {
  for (int q = 0; q < size; ++q) peers_[q].rank = q;
}

void* Communicator::staging(int i) const { return fake(uint64_t(i) * protocol_.segmentBytes); }

bool Communicator::describeBuffer(const void* p, size_t bytes, BufferRef* ref) const {
  *ref = BufferRef{p, bytes, true, {}, 0};
  return true;
}

// ---- the pool: every range is pool memory, a block is an address
MemoryPool::Block* MemoryPool::acquire(size_t bytes) {
  static thread_local Block block{};
  block.data = fake(uint64_t(1) << 40);
  return &block;
}
void MemoryPool::release(Block* b) {}
const MemoryPool::Block* MemoryPool::find(const void* p, size_t len) const {
  static const Block block{};
  return &block;
}

// ---- the kernels record
void reduceN(DataType dtype, ReduceOp op, void* out, const void* const* in, int nin, size_t count, double scale) {
  trace::Recorder::current().add(rdmacoll_trace::Op::kReduce, rdmacoll_trace::Flow::kNone, -1,
                                 uint64_t(nin) * count * dtypeSize(dtype));
}
void copyBytes(void* dst, const void* src, size_t n) {
  trace::Recorder::current().add(rdmacoll_trace::Op::kCopy, rdmacoll_trace::Flow::kNone, -1, n);
}

namespace trace {
Recorder::Recorder(std::vector<rdmacoll_trace::Step>* steps) : steps_(steps), outer_(recording) { recording = this; }
Recorder::~Recorder() { recording = outer_; }
Recorder& Recorder::current() {
  if (!recording) throw std::logic_error("internal: a traced primitive ran outside a trace");
  return *recording;
}
}  // namespace trace

}  // namespace rdmacoll
