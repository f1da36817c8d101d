// Where the ranks run, as the hierarchical allreduce needs it: a pure function of every
// rank's host (unit-tested without any transport through _rdmacoll_testing.hierarchy),
// computed once per Communicator (Communicator::topology()).
//
// Terms
//   host      hostOf[r]: the host index of rank r (bootstrap numbers hosts in order of
//             their first rank).
//   local     the ranks on my host, ascending; I am local[localIndex].
//   cross     one rank per host, each host's localIndex-th rank, in host order; I am
//             cross[crossIndex] (= my host's position among the hosts).
//   regular   every host runs the same number of ranks: only then does every rank have a
//             cross group of the same size, which the algorithm needs.
#pragma once
#include <algorithm>
#include <vector>

namespace rdmacoll {
namespace schedule {

struct Hierarchy {
  std::vector<int> local, cross;
  int localIndex = 0, crossIndex = 0;
  int hosts = 0;
  bool regular = false;
};

inline Hierarchy hierarchy(const std::vector<int>& hostOf, int r) {
  Hierarchy h;
  const int p = static_cast<int>(hostOf.size());
  std::vector<int> order;  // host indices in order of first appearance
  std::vector<std::vector<int>> ranksOf;
  for (int q = 0; q < p; ++q) {
    auto it = std::find(order.begin(), order.end(), hostOf[q]);
    if (it == order.end()) {
      order.push_back(hostOf[q]);
      ranksOf.emplace_back();
      it = order.end() - 1;
    }
    ranksOf[it - order.begin()].push_back(q);
  }
  h.hosts = static_cast<int>(order.size());
  h.regular = true;
  for (const auto& v : ranksOf) h.regular = h.regular && v.size() == ranksOf[0].size();
  const int mine = static_cast<int>(std::find(order.begin(), order.end(), hostOf[r]) - order.begin());
  h.local = ranksOf[mine];
  h.localIndex = static_cast<int>(std::find(h.local.begin(), h.local.end(), r) - h.local.begin());
  h.crossIndex = mine;
  for (const auto& v : ranksOf) h.cross.push_back(h.localIndex < static_cast<int>(v.size()) ? v[h.localIndex] : -1);
  return h;
}

}  // namespace schedule
}  // namespace rdmacoll
