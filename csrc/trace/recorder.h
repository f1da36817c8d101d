// What a traced rank did, step by step: the schedule that csrc/trace/ records by running
// the algorithms' own code (algorithms/*.cc, comm/ring.cc, comm/pairwise.cc, compiled a
// second time against this directory's comm/communicator.h, with primitives.cc here in
// place of comm/primitives.cc and communicator.cc's kernels in place of reduce/'s) for one
// rank at a time, moving no data and waiting for nothing. Terms: trace/schedule.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "trace/schedule.h"

namespace rdmacoll {
namespace trace {

// The steps of the rank being traced. Set for the duration of one rank's run (the
// reduction kernels, which see no communicator, record through it).
class Recorder {
 public:
  explicit Recorder(std::vector<rdmacoll_trace::Step>* steps);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;
  void add(rdmacoll_trace::Op op, rdmacoll_trace::Flow flow, int peer, uint64_t value) {
    steps_->push_back(rdmacoll_trace::Step{op, flow, peer, value});
  }
  static Recorder& current();

 private:
  std::vector<rdmacoll_trace::Step>* steps_;
  Recorder* outer_;
};

}  // namespace trace
}  // namespace rdmacoll
