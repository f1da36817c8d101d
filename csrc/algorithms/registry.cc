#include "algorithms/registry.h"

#include "algorithms/allreduce.h"
#include "algorithms/schedule.h"

namespace rdmacoll {
namespace algorithms {

namespace {
using tuning::CostModel;
// Costs: alpha per dependent step, beta per byte a rank sends, gamma per byte of
// reduction input it reads (n = bytes, p = ranks).
double eagerCost(const CostModel& m, size_t n, int p) {
  return m.alpha + m.beta * (p - 1) * double(n) + m.gamma * p * double(n);
}
// direct reads its peers' inputs in place (the reduction's gamma) and copies only its
// result into their outputs: (p-1)/p n moved. That is registered memory, the memory the
// library is built around (rc.empty, pool results, the framework adapters' buckets); user
// memory adds copies (allreduce_direct.cc), which the model, blind to memory kind because
// ranks may differ in it, does not see.
double directCost(const CostModel& m, size_t n, int p) {
  return 2 * m.alpha + m.beta * double(p - 1) / p * double(n) + m.gamma * double(n);
}
double ringCost(const CostModel& m, size_t n, int p) {
  return 2 * (p - 1) * m.alpha + m.beta * 2.0 * (p - 1) / p * double(n) +
         m.gamma * 2.0 * (p - 1) / p * double(n);
}
// p not a power of two: a folded pair adds a step before and after and n bytes each way.
double foldSteps(int p) { return schedule::foldRem(p) ? 1.0 : 0.0; }
double recursiveDoublingCost(const CostModel& m, size_t n, int p) {
  const double lg = schedule::log2Floor(p), f = foldSteps(p);
  return (lg + 2 * f) * m.alpha + m.beta * (lg + f) * double(n) + m.gamma * 2.0 * (lg + f) * double(n);
}
double halvingDoublingCost(const CostModel& m, size_t n, int p) {
  const double P = schedule::pow2Floor(p), lg = schedule::log2Floor(p), f = foldSteps(p);
  return (2 * lg + 2 * f) * m.alpha + m.beta * (2.0 * (P - 1) / P + f) * double(n) +
         m.gamma * (2.0 * (P - 1) / P + 2 * f) * double(n);
}
double treeCost(const CostModel& m, size_t n, int p) {
  // Depth ~ ceil(log2 p) each way; an interior rank sends n/2 up and n down in its tree
  // and n/2 up in the other, and reduces three inputs of n/2.
  double depth = 0;
  while ((1 << static_cast<int>(depth)) < p) ++depth;
  return 2 * depth * m.alpha + m.beta * 2.0 * double(n) + m.gamma * 1.5 * double(n);
}
}  // namespace

double hierarchicalCost(const CostModel& local, const CostModel& net, size_t n, int l, int h) {
  const double N = double(n), L = l, H = h;
  return 2 * (l - 1) * local.alpha + local.beta * 2.0 * (L - 1) / L * N + local.gamma * (L - 1) / L * N +
         2 * (h - 1) * net.alpha + net.beta * 2.0 * (H - 1) / H * N / L + net.gamma * (H - 1) / H * N / L;
}

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
      {5, "recursive_doubling", "log2 p steps, each exchanging the whole vector with the rank 2^s away through slots (extra ranks folded in): for small messages",
       allreduceRecursiveDoubling, [](const Communicator&, size_t) { return true; }, recursiveDoublingCost},
      {6, "halving_doubling", "Rabenseifner: reduce-scatter by recursive halving + allgather by recursive doubling through slots, any p (extra ranks folded in)",
       allreduceHalvingDoubling, [](const Communicator&, size_t) { return true; }, halvingDoublingCost},
      {7, "tree", "pipelined double binary tree (NCCL): two complementary trees each reduce half the vector up and broadcast it down, by segment, through slots",
       allreduceTree, [](const Communicator&, size_t) { return true; }, treeCost},
      {8, "hierarchical", "ring reduce-scatter within each host, ring allreduce of each share across hosts, ring allgather within each host: the network carries 1/l of the data (several hosts, same ranks per host)",
       allreduceHierarchical,
       [](const Communicator& c, size_t) { return c.topology().hosts > 1 && c.topology().regular; },
       // On one host it is a ring through slots; across hosts selection uses hierarchicalCost.
       ringCost},
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
