// Registry of the algorithms of allgather, broadcast, reducescatter and alltoall.
#include "algorithms/collectives.h"

namespace rdmacoll {
namespace algorithms {

namespace {
bool readable(const Communicator& c) { return c.peersReadable(); }

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
       allgatherDirect},
  };
  return all;
}

const std::vector<CollectiveAlgorithm<BroadcastFn>>& broadcastAlgorithms() {
  static const std::vector<CollectiveAlgorithm<BroadcastFn>> all = {
      {21, "direct", "every rank copies the root's buffer straight out of its memory (same host)", readable,
       broadcastDirect},
  };
  return all;
}

const std::vector<CollectiveAlgorithm<ReducescatterFn>>& reducescatterAlgorithms() {
  static const std::vector<CollectiveAlgorithm<ReducescatterFn>> all = {
      {22, "direct", "every rank reduces its share straight from every peer's input (same host)", readable,
       reducescatterDirect},
  };
  return all;
}

const std::vector<CollectiveAlgorithm<AlltoallFn>>& alltoallAlgorithms() {
  static const std::vector<CollectiveAlgorithm<AlltoallFn>> all = {
      {23, "direct", "every rank copies what each peer sends it straight out of the peer's memory (same host)",
       readable, alltoallDirect},
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
