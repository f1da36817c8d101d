// rdmacoll_trace::stepsOf: one rank of one call, run by the algorithm table's own entry over
// the traced Communicator (trace/schedule.h).
#include <stdexcept>

#include "algorithms/table.h"
#include "comm/communicator.h"
#include "trace/recorder.h"
#include "trace/schedule.h"

namespace rdmacoll_trace {

uint64_t headerBytes() { return sizeof(rdmacoll::CallHeader); }

const char* opName(Op op) {
  static const char* names[] = {"put", "await", "get", "reduce", "copy"};
  return names[static_cast<int>(op)];
}
const char* flowName(Flow flow) {
  static const char* names[] = {"", "slot", "header", "eager", "credit", "progress", "done", "store"};
  return names[static_cast<int>(flow)];
}

std::vector<Step> stepsOf(const Request& req, int rank) {
  using namespace rdmacoll;
  if (req.collective != "allreduce") throw std::invalid_argument("schedules are traced for allreduce only");
  if (req.ranks < 1 || rank < 0 || rank >= req.ranks) throw std::invalid_argument("rank out of range");
  if (!req.hostOf.empty() && static_cast<int>(req.hostOf.size()) != req.ranks) {
    throw std::invalid_argument("hostOf must name the host of every rank");
  }
  if (req.slots < 1 || req.segmentBytes == 0 || req.slotBytes == 0) {
    throw std::invalid_argument("segment_bytes, slot_bytes and slots must be positive");
  }
  Protocol protocol{};
  protocol.segmentBytes = req.segmentBytes;
  protocol.slotBytes = req.slotBytes;
  protocol.slots = req.slots;
  protocol.eagerBytes = req.eagerBytes;
  Communicator c(rank, req.ranks, protocol, req.hostOf, req.readable, req.mappable && req.readable);

  const algorithms::Algorithm* a = algorithms::find(Collective::kAllreduce, req.algorithm);
  if (a == nullptr) {
    throw std::invalid_argument("no allreduce algorithm '" + req.algorithm + "' (" +
                                algorithms::names(Collective::kAllreduce) + ")");
  }
  const DataType dtype = static_cast<DataType>(req.dtype);
  const size_t E = dtypeSize(dtype);
  const algorithms::Situation s = algorithms::Situation::of(c, Collective::kAllreduce, req.count * E);
  if (!a->usable(s)) throw std::invalid_argument(req.algorithm + " cannot run this call here");

  std::vector<Step> steps;
  if (req.ranks == 1) return steps;  // one rank runs no algorithm (runtime/: the input is the result)
  Call call;
  const uintptr_t base = uintptr_t(1) << 46;
  call.in = reinterpret_cast<const void*>(base);
  call.out = req.inPlace ? reinterpret_cast<void*>(base) : reinterpret_cast<void*>(base + (uintptr_t(1) << 42));
  call.count = req.count;
  call.dtype = dtype;
  call.elemBytes = E;
  call.seq = 1;
  call.hd.desc.algorithm = a->id;
  call.hd.desc.count = req.count;

  trace::Recorder recorder(&steps);
  a->run(c, call);
  return steps;
}

}  // namespace rdmacoll_trace
