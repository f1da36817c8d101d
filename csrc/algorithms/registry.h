// Every algorithm, registered with a name and a one-line description. The id travels in
// the descriptor hash, so ranks that chose differently get an error, not a hang.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tuning/cost_model.h"

namespace rdmacoll {
namespace algorithms {

struct AllreduceAlgorithm {
  uint8_t id;
  const char* name;
  const char* description;
  void (*run)(Communicator&, const Call&);
  // Whether it can run this call here (e.g. eager only carries small messages).
  bool (*usable)(const Communicator&, size_t bytes);
  // Predicted seconds for `bytes` over p ranks under model m (the selector minimises it).
  double (*cost)(const tuning::CostModel& m, size_t bytes, int p);
};

// Predicted seconds of `hierarchical` with l ranks on each of h hosts: the local rings
// under the shared-memory model, the cross ring (n/l bytes) under the network's.
double hierarchicalCost(const tuning::CostModel& local, const tuning::CostModel& net, size_t n, int l, int h);

const std::vector<AllreduceAlgorithm>& allreduceAlgorithms();
const AllreduceAlgorithm* findAllreduce(const std::string& name);  // nullptr if unknown

}  // namespace algorithms
}  // namespace rdmacoll
