#include "algorithms/table.h"

#include <algorithm>
#include <cmath>

#include "algorithms/allreduce.h"
#include "algorithms/collectives.h"
#include "algorithms/schedule.h"
#include "common/error.h"

namespace rdmacoll {
namespace algorithms {

namespace {

// ---- usable
bool always(const Situation&) { return true; }
bool readable(const Situation& s) { return s.peersReadable; }
bool mappable(const Situation& s) { return s.peersMappable; }
bool small(const Situation& s) { return s.bytes <= s.eagerBytes; }
bool severalRegularHosts(const Situation& s) { return s.hosts > 1 && s.ranksPerHost > 0; }

// ---- costs: n = bytes, p = ranks, m = the flat model (table.h: alpha per dependent step,
// beta per byte a rank moves, gamma per byte of reduction input it reads). Every algorithm
// but eager opens with a round of call headers (prim::headersFromNeighbours): one step
// more than its data needs (the simulator counts it, docs/scale.md).
double eagerCost(const Costs& k, const Situation& s) {
  const CostModel& m = k.flat;
  const double n = double(s.bytes), p = s.ranks;
  return m.alpha + m.beta * (p - 1) * n + m.gamma * p * n;
}
// direct reads its peers' inputs in place (the reduction's gamma) and copies only its
// result into their outputs: (p-1)/p n moved. That is registered memory, the memory the
// library is built around (rc.empty, pool results, the framework adapters' buckets); user
// memory adds copies or continues as another algorithm (allreduce_direct.cc), which the
// model, blind to memory kind because ranks may differ in it, does not see.
double directCost(const Costs& k, const Situation& s) {
  const CostModel& m = k.flat;
  const double n = double(s.bytes), p = s.ranks;
  return 2 * m.alpha + m.beta * (p - 1) / p * n + m.gamma * n;
}
// Its steps are pipelined around the ring: a rank's step k waits for its predecessor's step
// k-1, so the 2 (p-1) steps' latencies are those of the hops in ring order, each hop as
// often: between hosts x of the p hops pay the network's alpha and the rest the host's
// (hosts of 8 consecutive ranks: 1 in 8). Every hop carries the same bytes, so a host's
// link carries them once per ring hop leaving it (once, for consecutive ranks).
double ringCost(const Costs& k, const Situation& s) {
  const CostModel& m = k.flat;
  const double n = double(s.bytes), p = s.ranks;
  double alpha = m.alpha, load = 1;
  if (s.hosts > 1 && s.ringHostHops > 0) {
    alpha = ((p - s.ringHostHops) * k.local.alpha + s.ringHostHops * k.net.alpha) / p;
    load = std::max(1, s.ringHostLoad);
  }
  // (the header round first: every rank waits for both neighbours, one step at the network's)
  return m.alpha + 2 * (p - 1) * alpha + m.beta * load * 2.0 * (p - 1) / p * n + m.gamma * 2.0 * (p - 1) / p * n;
}
// p not a power of two: a folded pair adds a step before and after and n bytes each way.
double foldSteps(int p) { return schedule::foldRem(p) ? 1.0 : 0.0; }
// How many times its bytes an exchange between ranks `distance` apart costs on the links
// it shares (between hosts only: within one, peers never leave it). The l ranks of a host
// exchange with ranks as far away at once: when that is off the host (distance >= l), they
// share its link, each getting 1/l of it (the simulator's 8-rank hosts: halving-doubling
// 6x slower than the ring where this was not counted); across an oversubscribed core
// (Costs::oversubscription, ranks leafRanks or more apart), what reaches the core is
// shared that many times again.
double shared(const Costs& k, const Situation& s, int distance) {
  if (s.hosts <= 1) return 1.0;
  const int l = s.ranksPerHost;
  const double host = l > 1 && distance >= l ? double(l) : 1.0;
  const bool core = k.oversubscription > 1 && (k.leafRanks <= 0 || distance >= k.leafRanks);
  return host * (core ? k.oversubscription : 1.0);
}
// One pairwise exchange (pairwise.cc) of b bytes each way in pieces of `piece`: sent half
// the slots ahead of what is received, so the link carries b (times what shares it,
// `share`) while the rank reduces what arrived (`inputs` bytes read per byte received: 2,
// or 0 for a copy); the two overlap but for one piece, so the longer costs all of b and
// the shorter one piece. Pieces of b (piece 0: unknown) add them, as the one-segment
// forms did (the simulator's agreement test runs one segment per message).
double exchange(const CostModel& m, double b, double share, double inputs, double piece) {
  const double link = m.beta * share, work = m.gamma * inputs, one = piece > 0 ? std::min(b, piece) : b;
  return m.alpha + std::max(link, work) * b + std::min(link, work) * one;
}
// A folded pair (p not a power of two): the extra rank's n into its partner, reduced
// there as it arrives, before the exchanges, and the result's n back after them (the
// form before charged n once, as if the two overlapped: 1.1-1.4x short at 48 ranks).
double foldCost(const CostModel& m, int p, double n, double piece) {
  return foldSteps(p) * (exchange(m, n, 1, 2, piece) + exchange(m, n, 1, 0, piece));
}
// Step s exchanges the whole vector with the rank 2^s away. One header round first.
double recursiveDoublingCost(const Costs& k, const Situation& s) {
  const CostModel& m = k.flat;
  const double n = double(s.bytes);
  double t = m.alpha + foldCost(m, s.ranks, n, s.segmentBytes);
  for (int d = 1; d < schedule::pow2Floor(s.ranks); d <<= 1) t += exchange(m, n, shared(k, s, d), 2, s.segmentBytes);
  return t;
}
// Reduce-scatter step s exchanges n / 2^(s+1) with the rank P / 2^(s+1) away, allgather
// the same back: 2 (P-1)/P n in all where no exchange shares a link (shared above).
double halvingDoublingCost(const Costs& k, const Situation& s) {
  const CostModel& m = k.flat;
  const double n = double(s.bytes);
  const int P = schedule::pow2Floor(s.ranks);
  double t = m.alpha + foldCost(m, s.ranks, n, s.segmentBytes);
  for (int d = P / 2; d >= 1; d /= 2) {
    const double b = n * d / P, share = shared(k, s, d);
    t += exchange(m, b, share, 2, s.segmentBytes) + exchange(m, b, share, 0, s.segmentBytes);
  }
  return t;
}
// The skewed pipeline of allreduce_tree.cc: halves of n/2 in segments of s bytes. Filling
// it, a segment goes up from a leaf to the root and back down (schedule::treeCriticalPath:
// its levels, each a step; the segments that cross one link after another on the way, a
// parent's children's up and its result to each of them down; the segments reduced).
// Simulated with one segment on uniform links, 2-129 ranks, that is exact (0.1%) at 118
// rank counts and one segment time short at p = 2^k - 2^j (12, 24, 28, 48, ...), where a
// rank runs tree 0's step of an iteration before tree 1's and a leaf's segment waits
// behind a reduction. The form before (2 ceil(log2 p) levels of parents of two children,
// each 2 s over a link and 1.5 s reduced per level) was 8% over at 64 ranks: the root has
// one child. After that every further segment costs the busiest rank's step, where four
// segments of both trees cross its link and it reduces three. Against the simulated
// pipeline at 4-256 ranks on uniform links, 1-256 MiB in 256 KiB segments, 21% under to
// 16% over (docs/scale.md).
// Four segments per step is a rank's own link. Where a host's l ranks share its link, the
// tree edges leaving the host cross it (6 for hosts of 8 consecutive ranks: the simulated
// tree was 1.5-1.7x the form that charged 4 there); across an oversubscribed core, the
// edges leaving a leaf's ranks share its uplinks: its hosts' links (leafRanks / l, l the
// ranks per host on average, at least one host) / oversubscription (any edge, and so every
// host's, for leafRanks 0).
double treeCost(const Costs& k, const Situation& s) {
  const CostModel& m = k.flat;
  const schedule::TreePath& path = s.treePath;
  const double half = double(s.bytes) / 2, seg = s.segmentBytes ? std::min(half, double(s.segmentBytes)) : half;
  const double nseg = seg > 0 ? std::ceil(half / seg) : 0;
  double load = s.hosts > 1 ? std::max(4.0, double(s.treeHostEdges)) : 4.0;
  if (s.hosts > 1 && k.oversubscription > 1) {
    const double hostsPerLeaf = k.leafRanks > 0 ? std::max(1.0, k.leafRanks * double(s.hosts) / s.ranks) : 1.0;
    load = std::max(load, (k.leafRanks > 0 ? s.treeLeafEdges : load) * k.oversubscription / hostsPerLeaf);
  }
  const double fill = path.levels * m.alpha + path.links * m.beta * seg + path.inputs * m.gamma * seg;
  const double steady = std::max(nseg - 1, 0.0) * (m.alpha + m.beta * load * seg + m.gamma * 3 * seg);
  return m.alpha + fill + steady;
}
// l ranks on each of h hosts: rings within hosts under the local constants (a
// reduce-scatter and an allgather of n), then l rings across hosts at once, each an
// allreduce of n/l under the network's: the l rings share each host's link, so it carries
// the whole n (the form before gave each ring the link to itself, l times short of the
// simulated time at 8 ranks per host, docs/scale.md). A ring's reduce-scatter reads two
// inputs per byte it reduces, as ringCost counts (the form before counted one: 9% short of
// the simulated time at 64 ranks and 16 MiB, all of it the reduction's). One header round
// first.
double hierarchicalCost(const Costs& k, const Situation& s) {
  const double N = double(s.bytes), l = s.ranksPerHost, h = s.hosts;
  const CostModel &a = k.local, &b = k.net;
  return b.alpha + 2 * (l - 1) * a.alpha + a.beta * 2.0 * (l - 1) / l * N + a.gamma * 2.0 * (l - 1) / l * N +
         2 * (h - 1) * b.alpha + b.beta * 2.0 * (h - 1) / h * N + b.gamma * 2.0 * (h - 1) / h * N / l;
}
// The other collectives: "direct" forms pay a header round, then each rank copies (or
// reduces) its bytes straight out of peer memory, one pass. Slot forms: p-1 steps (the
// chain is pipelined, so its depth is paid once), each byte copied into a slot and out.
double gatherDirectCost(const Costs& k, const Situation& s) {
  return 2 * k.flat.alpha + k.flat.beta * (s.ranks - 1.0) / s.ranks * double(s.bytes);
}
double gatherSlotsCost(const Costs& k, const Situation& s) {
  return (s.ranks - 1) * k.flat.alpha + k.flat.beta * 2.0 * (s.ranks - 1.0) / s.ranks * double(s.bytes);
}
double broadcastDirectCost(const Costs& k, const Situation& s) {
  return 2 * k.flat.alpha + k.flat.beta * double(s.bytes);
}
double broadcastChainCost(const Costs& k, const Situation& s) {
  return (s.ranks - 1) * k.flat.alpha + k.flat.beta * 2.0 * double(s.bytes);
}
double reducescatterDirectCost(const Costs& k, const Situation& s) {
  const CostModel& m = k.flat;
  return 2 * m.alpha + m.beta * (s.ranks - 1.0) / s.ranks * double(s.bytes) + m.gamma * double(s.bytes);
}
double reducescatterRingCost(const Costs& k, const Situation& s) {
  const CostModel& m = k.flat;
  const double f = (s.ranks - 1.0) / s.ranks * double(s.bytes);
  return (s.ranks - 1) * m.alpha + m.beta * 2.0 * f + m.gamma * 2.0 * f;
}
double headersCost(const Costs& k, const Situation& s) { return k.flat.alpha; }

using C = Collective;

std::vector<Algorithm> build() {
  std::vector<Algorithm> all = {
      // allreduce
      {C::kAllreduce, "eager",
       "every rank sends its whole input to every peer, each reduces p inputs in rank order: 1 "
       "step, for small messages",
       small, eagerCost, allreduceEager},
      {C::kAllreduce, "direct",
       "each rank reduces its 1/p straight from every peer's input and stores the result straight "
       "into every peer's output: one pass, same host",
       mappable, directCost, allreduceDirect},
      {C::kAllreduce, "ring",
       "pipelined ring reduce-scatter + allgather reading the predecessor's memory in place (map "
       "or cross-memory read)",
       readable, ringCost, allreduceRing},
      {C::kAllreduce, "ring_slots",
       "pipelined ring reduce-scatter + allgather through one-sided writes into the successor's "
       "receive slots",
       always, ringCost, allreduceRingSlots},
      {C::kAllreduce, "recursive_doubling",
       "log2 p steps, each exchanging the whole vector with the rank 2^s away through slots (extra "
       "ranks folded in): for small messages",
       always, recursiveDoublingCost, allreduceRecursiveDoubling},
      {C::kAllreduce, "halving_doubling",
       "Rabenseifner: reduce-scatter by recursive halving + allgather by recursive doubling "
       "through slots, any p (extra ranks folded in)",
       always, halvingDoublingCost, allreduceHalvingDoubling},
      {C::kAllreduce, "tree",
       "pipelined double binary tree (NCCL): two complementary trees each reduce half the vector "
       "up and broadcast it down, by segment, through slots",
       always, treeCost, allreduceTree},
      {C::kAllreduce, "hierarchical",
       "ring reduce-scatter within each host, ring allreduce of each share across hosts, ring "
       "allgather within each host: the network carries 1/l of the data (several hosts, same ranks "
       "per host)",
       severalRegularHosts, hierarchicalCost, allreduceHierarchical},
      {C::kAllreduce, "direct>ring_slots",
       "direct at 12 ranks or more, after the call headers showed user memory of 4-16 MiB on some "
       "rank: continues as ring_slots (faster there than staging or cross-memory calls)",
       nullptr, nullptr, ringSlotsAfterHeaders, "direct"},
      // allgather
      {C::kAllgather, "direct", "every rank copies every peer's part straight out of its memory (same host)", readable,
       gatherDirectCost, allgatherDirect},
      {C::kAllgather, "ring", "parts travel around the ring through slot messages, p-1 steps (any transport)", always,
       gatherSlotsCost, allgatherRing},
      // broadcast
      {C::kBroadcast, "direct", "every rank copies the root's buffer straight out of its memory (same host)", readable,
       broadcastDirectCost, broadcastDirect},
      {C::kBroadcast, "chain",
       "the root's buffer is pipelined root -> root+1 -> ... through slot messages (any transport)", always,
       broadcastChainCost, broadcastChain},
      // reducescatter
      {C::kReducescatter, "direct", "every rank reduces its share straight from every peer's input (same host)",
       readable, reducescatterDirectCost, reducescatterDirect},
      {C::kReducescatter, "ring",
       "partial sums of each share travel around the ring through slot messages (any transport)", always,
       reducescatterRingCost, reducescatterRing},
      // alltoall
      {C::kAlltoall, "direct",
       "every rank copies what each peer sends it straight out of the peer's memory (same host)", readable,
       gatherDirectCost, alltoallDirect},
      {C::kAlltoall, "pairwise",
       "at step k every rank sends to rank+k and receives from rank-k through slot messages (any "
       "transport)",
       always, gatherSlotsCost, alltoallPairwise},
      // barrier
      {C::kBarrier, "headers", "every rank sends its call header to every peer and returns once it has all of theirs",
       always, headersCost, barrierHeaders},
  };
  for (size_t i = 0; i < all.size(); ++i) all[i].id = static_cast<uint8_t>(i + 1);
  return all;
}

}  // namespace

const std::vector<Algorithm>& table() {
  static const std::vector<Algorithm> all = build();
  return all;
}

const Algorithm& byId(uint8_t id) {
  const auto& all = table();
  if (id == 0 || id > all.size()) throw Error("internal: no algorithm with id " + std::to_string(id));
  return all[id - 1];
}

const Algorithm* find(Collective collective, const std::string& name) {
  for (const Algorithm& a : table()) {
    if (a.collective == collective && !a.continues && name == a.name) return &a;
  }
  return nullptr;
}

const Algorithm& continuation(const char* name) {
  for (const Algorithm& a : table()) {
    if (a.continues && std::string(name) == a.name) return a;
  }
  throw Error(std::string("internal: no continuation ") + name);
}

std::string names(Collective collective) {
  std::string s;
  for (const Algorithm& a : table()) {
    if (a.collective == collective && !a.continues) s += (s.empty() ? "" : ", ") + std::string(a.name);
  }
  return s;
}

Situation Situation::of(const Communicator& c, Collective collective, size_t bytes) {
  const schedule::Hierarchy& t = c.topology();
  Situation s;
  s.collective = collective;
  s.bytes = bytes;
  s.ranks = c.size();
  s.hosts = t.hosts;
  s.ranksPerHost = t.regular ? static_cast<int>(t.local.size()) : 0;
  s.peersReadable = c.peersReadable();
  s.peersMappable = c.peersMappable();
  s.eagerBytes = c.protocol().eagerBytes;
  s.segmentBytes = std::min(c.protocol().segmentBytes, c.protocol().slotBytes);
  return s;
}

void Situation::countCrossings(const std::vector<int>& hostOf, int leafRanks) {
  ringHostHops = ringHostLoad = treeHostEdges = treeLeafEdges = 0;
  treePath = schedule::treeCriticalPath(ranks);
  if (hosts > 1 && static_cast<int>(hostOf.size()) == ranks) {
    std::vector<int> leaving(*std::max_element(hostOf.begin(), hostOf.end()) + 1, 0);
    for (int r = 0; r < ranks; ++r) {
      if (hostOf[r] != hostOf[(r + 1) % ranks]) ++ringHostHops, ++leaving[hostOf[r]];
    }
    ringHostLoad = *std::max_element(leaving.begin(), leaving.end());
    treeHostEdges = schedule::treeEdgesLeaving(hostOf);
  }
  if (leafRanks > 0 && leafRanks < ranks) {
    std::vector<int> leafOf(ranks);
    for (int r = 0; r < ranks; ++r) leafOf[r] = r / leafRanks;
    treeLeafEdges = schedule::treeEdgesLeaving(leafOf);
  }
}

}  // namespace algorithms
}  // namespace rdmacoll
