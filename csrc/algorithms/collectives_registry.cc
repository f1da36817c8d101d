// Registry of the algorithms of allgather, broadcast, reducescatter and alltoall.
#include "algorithms/collectives.h"

namespace rdmacoll {
namespace algorithms {

namespace {
bool readable(const Communicator& c) { return c.peersReadable(); }
bool always(const Communicator&) { return true; }

using tuning::CostModel;
// Costs (alpha per dependent step, beta per byte a rank moves, gamma per byte of
// reduction input). "direct" forms: a header round, then each rank copies (or reduces)
// its bytes straight out of peer memory, one pass. Slot forms: p-1 steps (the chain is
// pipelined, so its depth is paid once), each byte copied into a slot and out again.
double gatherDirectCost(const CostModel& m, size_t n, int p) {
  return 2 * m.alpha + m.beta * (p - 1.0) / p * double(n);
}
double gatherSlotsCost(const CostModel& m, size_t n, int p) {
  return (p - 1) * m.alpha + m.beta * 2.0 * (p - 1.0) / p * double(n);
}
double broadcastDirectCost(const CostModel& m, size_t n, int) { return 2 * m.alpha + m.beta * double(n); }
double broadcastChainCost(const CostModel& m, size_t n, int p) {
  return (p - 1) * m.alpha + m.beta * 2.0 * double(n);
}
double reducescatterDirectCost(const CostModel& m, size_t n, int p) {
  return 2 * m.alpha + m.beta * (p - 1.0) / p * double(n) + m.gamma * double(n);
}
double reducescatterRingCost(const CostModel& m, size_t n, int p) {
  return (p - 1) * m.alpha + m.beta * 2.0 * (p - 1.0) / p * double(n) + m.gamma * 2.0 * (p - 1.0) / p * double(n);
}

template <class Fn>
std::vector<std::string> names(const std::vector<CollectiveAlgorithm<Fn>>& all) {
  std::vector<std::string> out;
  for (const auto& a : all) out.emplace_back(a.name);
  return out;
}
}  // namespace

const std::vector<CollectiveAlgorithm<AllgatherFn>>& allgatherAlgorithms() {
  static const std::vector<CollectiveAlgorithm<AllgatherFn>> all = {
      {20, "direct", "every rank copies every peer's part straight out of its memory (same host)", readable,
       allgatherDirect, gatherDirectCost},
      {30, "ring", "parts travel around the ring through slot messages, p-1 steps (any transport)", always,
       allgatherRing, gatherSlotsCost},
  };
  return all;
}

const std::vector<CollectiveAlgorithm<BroadcastFn>>& broadcastAlgorithms() {
  static const std::vector<CollectiveAlgorithm<BroadcastFn>> all = {
      {21, "direct", "every rank copies the root's buffer straight out of its memory (same host)", readable,
       broadcastDirect, broadcastDirectCost},
      {31, "chain", "the root's buffer is pipelined root -> root+1 -> ... through slot messages (any transport)",
       always, broadcastChain, broadcastChainCost},
  };
  return all;
}

const std::vector<CollectiveAlgorithm<ReducescatterFn>>& reducescatterAlgorithms() {
  static const std::vector<CollectiveAlgorithm<ReducescatterFn>> all = {
      {22, "direct", "every rank reduces its share straight from every peer's input (same host)", readable,
       reducescatterDirect, reducescatterDirectCost},
      {32, "ring", "partial sums of each share travel around the ring through slot messages (any transport)",
       always, reducescatterRing, reducescatterRingCost},
  };
  return all;
}

const std::vector<CollectiveAlgorithm<AlltoallFn>>& alltoallAlgorithms() {
  static const std::vector<CollectiveAlgorithm<AlltoallFn>> all = {
      {23, "direct", "every rank copies what each peer sends it straight out of the peer's memory (same host)",
       readable, alltoallDirect, gatherDirectCost},
      {33, "pairwise", "at step k every rank sends to rank+k and receives from rank-k through slot messages (any transport)",
       always, alltoallPairwise, gatherSlotsCost},
  };
  return all;
}

std::vector<std::string> algorithmNames(Collective coll) {
  switch (coll) {
    case Collective::kAllgather: return names(allgatherAlgorithms());
    case Collective::kBroadcast: return names(broadcastAlgorithms());
    case Collective::kReducescatter: return names(reducescatterAlgorithms());
    case Collective::kAlltoall: return names(alltoallAlgorithms());
    default: return {};
  }
}

}  // namespace algorithms
}  // namespace rdmacoll
