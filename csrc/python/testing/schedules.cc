// Test hooks for the pure schedule arithmetic of the algorithms (algorithms/*.h):
// unit-tested from Python without any transport (tests/test_partition.py and friends).
#include <pybind11/pybind11.h>

#include "python/testing/hooks.h"
#include <pybind11/stl.h>

#include "algorithms/partition.h"
#include "comm/topology.h"
#include "algorithms/schedule.h"

namespace py = pybind11;

void bindTestingSchedules(py::module_& m) {
  using namespace rdmacoll;
  m.def(
      "hierarchy",
      [](const std::vector<int>& hostOf, int r) {
        const schedule::Hierarchy h = schedule::hierarchy(hostOf, r);
        return py::dict(py::arg("local") = h.local, py::arg("local_index") = h.localIndex, py::arg("cross") = h.cross,
                        py::arg("cross_index") = h.crossIndex, py::arg("hosts") = h.hosts,
                        py::arg("regular") = h.regular);
      },
      "The hierarchical allreduce's groups of rank r, given every rank's host index.");
  m.def("ring_chunk", &ring::ringChunk);
  m.def("chunk_begin", &ring::chunkBegin);
  m.def("segments_per_chunk", &ring::segmentsPerChunk);
  // algorithms/schedule.h
  m.def("pow2_floor", &schedule::pow2Floor);
  m.def("fold_partner", &schedule::foldPartner);
  m.def("folded_away", &schedule::foldedAway);
  m.def("fold_new_rank", &schedule::foldNewRank);
  m.def("fold_old_rank", &schedule::foldOldRank);
  m.def("rd_steps", &schedule::rdSteps);
  m.def("rd_partner", &schedule::rdPartner);
  m.def("hd_steps", &schedule::hdSteps);
  m.def("hd_partner", &schedule::hdPartner);
  // (keep_lo, keep_n, send_lo, send_n) in blocks, for new rank nr among P at step s
  m.def("hd_blocks", [](int nr, int P, int s) {
    auto k = schedule::hdKeep(nr, P, s), g = schedule::hdSend(nr, P, s);
    return py::make_tuple(k.lo, k.n, g.lo, g.n);
  });
  m.def("block_elems", [](size_t count, int P, int lo, int n) {
    auto e = schedule::blockElems(count, P, {lo, n});
    return py::make_tuple(e.begin, e.n);
  });
  // (parent, child0, child1) of rank r in tree t of the double binary tree
  m.def("tree_links", [](int p, int r, int t) {
    auto l = schedule::dtree(p, r, t);
    return py::make_tuple(l.parent, l.child[0], l.child[1]);
  });
  m.def("tree_root", &schedule::treeRoot);
}
