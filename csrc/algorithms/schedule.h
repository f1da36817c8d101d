// Rank arithmetic of recursive doubling, halving-doubling and the double binary tree, as
// pure functions (unit-tested without any transport, see tests/test_schedule.py through
// the _rdmacoll_testing hooks of python/testing/schedules.cc).
//
// Terms
//   fold     non-powers of two: P = the largest power of two <= p, rem = p - P. Before
//            the power-of-two part, every even rank r < 2 rem sends its whole input to
//            r + 1, which reduces it into its own and takes part for both; after it,
//            r + 1 sends the whole result back. The P participants are renumbered
//            0..P-1 ("new ranks"): odd r < 2 rem -> r / 2, r >= 2 rem -> r - rem.
//   block    halving-doubling splits count into P blocks as equal as possible
//            (ring::chunkBegin(count, P, b)); new rank b owns block b after the
//            reduce-scatter.
//   step     recursive doubling: step s (0..log2 P - 1) pairs new rank n with n ^ 2^s.
//            halving-doubling reduce-scatter: step s pairs n with n ^ (P >> (s+1)); the
//            pair splits the blocks both hold, each keeps the half its bit selects and
//            sends the other half. Allgather step t undoes reduce-scatter step
//            s = log2 P - 1 - t: a rank sends what it kept and receives what it sent.
//   trees    the double binary tree of NCCL: tree 0 is the in-order binary tree over
//            ranks 0..p-1 (rank 0 the root with one child, odd ranks the leaves); tree 1
//            is its mirror (r -> p-1-r) for even p and its shift (r -> r+1) for odd p,
//            so the leaves of one tree are the interior ranks of the other (except rank
//            0 for odd p, the root of tree 0, which is interior in tree 1).
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "algorithms/partition.h"

namespace rdmacoll {
namespace schedule {

inline int pow2Floor(int p) {
  int P = 1;
  while (P * 2 <= p) P *= 2;
  return P;
}
inline int log2Floor(int p) {
  int l = 0;
  while ((2 << l) <= p) ++l;
  return l;
}

// ---- fold of the ranks beyond the largest power of two
inline int foldRem(int p) { return p - pow2Floor(p); }
// The rank r exchanges its whole vector with before/after the power-of-two part, or -1.
inline int foldPartner(int r, int p) { return r < 2 * foldRem(p) ? (r ^ 1) : -1; }
// True for the even ranks r < 2 rem, which hand their input over and wait.
inline bool foldedAway(int r, int p) { return r < 2 * foldRem(p) && (r & 1) == 0; }
// New rank among the P participants, -1 for a folded-away rank.
inline int foldNewRank(int r, int p) {
  const int rem = foldRem(p);
  if (r < 2 * rem) return (r & 1) ? r / 2 : -1;
  return r - rem;
}
inline int foldOldRank(int n, int p) {
  const int rem = foldRem(p);
  return n < rem ? 2 * n + 1 : n + rem;
}

// ---- recursive doubling: partner (an original rank) at step s, -1 if r is folded away
inline int rdSteps(int p) { return log2Floor(p); }
inline int rdPartner(int r, int p, int s) {
  const int n = foldNewRank(r, p);
  return n < 0 ? -1 : foldOldRank(n ^ (1 << s), p);
}

// ---- halving-doubling
inline int hdSteps(int p) { return log2Floor(p); }  // per phase
inline int hdPartner(int r, int p, int s) {         // reduce-scatter step s (allgather: s reversed)
  const int n = foldNewRank(r, p);
  return n < 0 ? -1 : foldOldRank(n ^ (pow2Floor(p) >> (s + 1)), p);
}
// Blocks [lo, lo + n).
struct Blocks {
  int lo, n;
};
// Reduce-scatter step s of new rank `nr` among P: the blocks it keeps (and reduces) and
// the blocks it sends. Before step s a rank holds the P >> s blocks around it.
inline Blocks hdKeep(int nr, int P, int s) {
  const int half = P >> (s + 1);
  const int lo = nr & ~(2 * half - 1);  // start of the 2*half blocks held before step s
  return (nr & half) ? Blocks{lo + half, half} : Blocks{lo, half};
}
inline Blocks hdSend(int nr, int P, int s) {
  const int half = P >> (s + 1);
  const int lo = nr & ~(2 * half - 1);
  return (nr & half) ? Blocks{lo, half} : Blocks{lo + half, half};
}
// Element range [begin, begin + n) of blocks b of count elements split into P blocks.
inline ring::Range blockElems(size_t count, int P, Blocks b) {
  const size_t begin = ring::chunkBegin(count, P, b.lo);
  return {begin, ring::chunkBegin(count, P, b.lo + b.n) - begin};
}

// ---- double binary tree
struct TreeLinks {
  int parent;    // -1 at the root
  int child[2];  // -1 where absent; child[0] < child[1] in tree 0's numbering
};
// NCCL's in-order binary tree (ncclGetBtree): a rank whose lowest set bit is b has parent
// (r ^ b) | 2b (or r ^ b when that is past the end) and children r -+ b/2 (the right one
// brought within range by halving the distance). Rank 0 is the root with one child.
inline TreeLinks btree(int p, int r) {
  int bit = 1;
  while (bit < p && !(bit & r)) bit <<= 1;
  if (r == 0) return {-1, {-1, p > 1 ? bit >> 1 : -1}};
  int up = (r ^ bit) | (bit << 1);
  if (up >= p) up = r ^ bit;
  int low = bit >> 1;
  const int down0 = low == 0 ? -1 : r - low;
  int down1 = -1;
  while (low > 0) {
    if (r + low < p) {
      down1 = r + low;
      break;
    }
    low >>= 1;
  }
  return {up, {down0, down1}};
}
// Links of rank r in tree t (0 or 1) of the double binary tree over p ranks.
inline TreeLinks dtree(int p, int r, int t) {
  if (t == 0) return btree(p, r);
  auto map = [&](int x, bool back) {
    if (x < 0) return -1;
    if (p % 2 == 0) return p - 1 - x;             // mirror (an involution)
    return back ? (x + 1) % p : (x - 1 + p) % p;  // shift
  };
  TreeLinks l = btree(p, map(r, false));
  return {map(l.parent, true), {map(l.child[0], true), map(l.child[1], true)}};
}
inline int treeRoot(int p, int t) {
  if (t == 0) return 0;
  return p % 2 == 0 ? p - 1 : 1 % p;
}
// One segment through the double binary tree over p ranks, up from the leaves to the root
// and back down, in the counts that cost it (the tree cost's fill, algorithms/table.cc).
// levels: the hops up from the deepest leaf and back down to it. links: how many segment
// times over one link it takes: a parent takes its children's segments over its link (two
// at once: both are through two segment times after the first began, and one after the
// second began), and sends its result to each child over it, two at once. inputs: the
// segments reduced on the way up to the root from a leaf (a parent reduces its children's
// and its own), the most over the leaves. Tree 1 has tree 0's shape (a mirror or a shift).
// 64 ranks: 12 levels, 22 links and 17 inputs, where 6 levels of parents of two children
// would give 12, 24 and 18 (the root has one child). O(p).
struct TreePath {
  int levels = 0, links = 0, inputs = 0;
};
namespace detail {
// Rank v's subtree: when v's segment is through its parent's link (segment times from the
// start), with the counts of the path from the root down to v (levels, down: the links
// down to v, inputs) folded into `most` at the leaves.
inline int treeUp(int p, int v, int levels, int down, int inputs, TreePath& most, int& mostDown) {
  const TreeLinks l = btree(p, v);
  const int children = (l.child[0] >= 0) + (l.child[1] >= 0);
  if (children == 0) {
    most.levels = std::max(most.levels, levels);
    most.inputs = std::max(most.inputs, inputs);
    mostDown = std::max(mostDown, down);
    return 0;
  }
  int t[2], n = 0;
  for (int c : l.child) {
    if (c >= 0) t[n++] = treeUp(p, c, levels + 2, down + children, inputs + children + 1, most, mostDown);
  }
  return n == 1 ? t[0] + 1 : std::max(std::min(t[0], t[1]) + 2, std::max(t[0], t[1]) + 1);
}
}  // namespace detail
inline TreePath treeCriticalPath(int p) {
  TreePath most;
  int mostDown = 0;
  if (p < 2) return most;
  most.links = detail::treeUp(p, 0, 0, 0, 0, most, mostDown);  // (rank 0: tree 0's root)
  most.links += mostDown;
  return most;
}

// The most edges of the double binary tree over groupOf.size() ranks (both trees) that
// join a rank of one group to a rank outside it (groupOf[r]: r's group, numbered from 0):
// how many of the pipelined tree's segments cross one group's links each way at once (an
// edge in both trees counts twice). One rank's own: 4. Hosts of 8 consecutive ranks: 6 at
// 32-1,024 ranks, 4 at 16 (two hosts); hosts of 3: 10.
inline int treeEdgesLeaving(const std::vector<int>& groupOf) {
  const int p = static_cast<int>(groupOf.size());
  if (p == 0) return 0;
  std::vector<int> leaving(*std::max_element(groupOf.begin(), groupOf.end()) + 1, 0);
  for (int t = 0; t < 2; ++t) {
    for (int r = 0; r < p; ++r) {
      const int up = dtree(p, r, t).parent;
      if (up >= 0 && groupOf[r] != groupOf[up]) ++leaving[groupOf[r]], ++leaving[groupOf[up]];
    }
  }
  return *std::max_element(leaving.begin(), leaving.end());
}

}  // namespace schedule
}  // namespace rdmacoll
