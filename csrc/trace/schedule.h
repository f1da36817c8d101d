// The schedules as data: each rank's sequence of steps for one collective call, recorded by
// running the algorithms' own code (trace/recorder.h) and replayed by the simulator
// (benchmarks/scale/simulate.cc) or checked against the bytes a real run moves
// (tests/test_scale.py). Declared in a namespace of its own, rdmacoll_trace, because the
// traced code is the core's compiled a second time: CMakeLists.txt builds it with
// -Drdmacoll=rdmacoll_trace so that its symbols never meet the core's.
//
// Terms
//   put      a one-sided write of `value` bytes into `peer`'s memory, posted (the rank
//            goes on at once); on one (sender, receiver) pair writes are delivered in the
//            order they were posted, as on a queue pair or a byte stream.
//   flow     what a put carries: slot data, a call header, an eager message, a slot
//            credit, a progress or done counter, or a store into the peer's result. The
//            receiver counts arrivals per (peer, flow).
//   await    wait until `value` puts of `flow` from `peer` have arrived (counted from the
//            start of the call): how a step depends on other ranks' steps. A step depends
//            on everything before it on its own rank (program order) and, through
//            awaits, on the puts it waits for.
//   get      a read of `value` bytes of `peer`'s memory (shared memory's map or
//            cross-memory read): the rank waits until they are here.
//   reduce   `value` bytes of reduction input read (all inputs together): what the cost
//            model's gamma counts.
//   copy     `value` bytes copied within the rank (a slot into the result, the input into
//            the output).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rdmacoll_trace {

enum class Op : uint8_t { kPut = 0, kAwait = 1, kGet = 2, kReduce = 3, kCopy = 4 };
enum class Flow : uint8_t {
  kNone = 0,
  kSlot = 1,
  kHeader = 2,
  kEager = 3,
  kCredit = 4,
  kProgress = 5,
  kDone = 6,
  kStore = 7
};
constexpr int kFlows = 8;

struct Step {
  Op op;
  Flow flow;
  int32_t peer;    // -1 for reduce and copy
  uint64_t value;  // bytes (put, get, reduce, copy) or a count (await)
};

// One call as the schedule sees it: identical on every rank.
struct Request {
  std::string collective = "allreduce";  // allreduce only, so far
  std::string algorithm;                 // a selectable entry of the algorithm table
  int ranks = 2;
  uint64_t count = 0;       // elements
  int dtype = 0;            // rdmacoll's DataType code (common/types.h)
  std::vector<int> hostOf;  // host of every rank (empty: one host)
  bool readable = false;    // peers' memory readable in place (same host: shm)
  bool mappable = false;    // ... and mapped
  bool inPlace = false;     // out == in
  // The protocol (comm/protocol.h), as the job's settings give it.
  uint64_t segmentBytes = 0, slotBytes = 0, eagerBytes = 0;
  int slots = 0;
};

// Bytes of a call header and of a counter store as they travel (comm/ctrl.h).
uint64_t headerBytes();
constexpr uint64_t kCounterBytes = 8;

// The steps of rank `rank`. Throws std::invalid_argument for what cannot be traced (an
// unknown algorithm, one not usable for the request, another collective).
std::vector<Step> stepsOf(const Request& req, int rank);

const char* opName(Op op);
const char* flowName(Flow flow);

}  // namespace rdmacoll_trace
