#include "algorithms/registry.h"

#include "algorithms/allreduce.h"

namespace rdmacoll {
namespace algorithms {

namespace {
using tuning::CostModel;
// Costs: alpha per dependent step, beta per byte a rank sends, gamma per byte of
// reduction input it reads (n = bytes, p = ranks).
double eagerCost(const CostModel& m, size_t n, int p) {
  return m.alpha + m.beta * (p - 1) * double(n) + m.gamma * p * double(n);
}
double directCost(const CostModel& m, size_t n, int p) {
  return 2 * m.alpha + m.beta * 2.0 * (p - 1) / p * double(n) + m.gamma * double(n);
}
double ringCost(const CostModel& m, size_t n, int p) {
  return 2 * (p - 1) * m.alpha + m.beta * 2.0 * (p - 1) / p * double(n) +
         m.gamma * 2.0 * (p - 1) / p * double(n);
}
}  // namespace

const std::vector<AllreduceAlgorithm>& allreduceAlgorithms() {
  static const std::vector<AllreduceAlgorithm> all = {
      {1, "eager", "every rank sends its whole input to every peer, each reduces p inputs in rank order: 1 step, for small messages",
       allreduceEager, [](const Communicator& c, size_t bytes) { return bytes <= c.config().eagerBytes; }, eagerCost},
      {4, "direct", "each rank reduces its 1/p straight from every peer's input and stores the result straight into every peer's output: one pass, same host",
       allreduceDirect, [](const Communicator& c, size_t) { return c.peersMappable(); }, directCost},
      {2, "ring", "pipelined ring reduce-scatter + allgather reading the predecessor's memory in place (map or cross-memory read)",
       allreduceRing, [](const Communicator& c, size_t) { return c.peersReadable(); }, ringCost},
      {3, "ring_slots", "pipelined ring reduce-scatter + allgather through one-sided writes into the successor's receive slots",
       allreduceRingSlots, [](const Communicator&, size_t) { return true; }, ringCost},
  };
  return all;
}

const AllreduceAlgorithm* findAllreduce(const std::string& name) {
  for (const auto& a : allreduceAlgorithms()) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

}  // namespace algorithms
}  // namespace rdmacoll
