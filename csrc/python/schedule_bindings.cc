// Test hooks for the pure schedule arithmetic of the algorithms (algorithms/*.h):
// unit-tested from Python without any transport (tests/test_partition.py and friends).
#include <pybind11/pybind11.h>

#include "python/bindings.h"
#include <pybind11/stl.h>

#include "algorithms/partition.h"

namespace py = pybind11;

void bindSchedules(py::module_& m) {
  using namespace rdmacoll;
  m.def("_ring_chunk", &ring::ringChunk);
  m.def("_chunk_begin", &ring::chunkBegin);
  m.def("_segments_per_chunk", &ring::segmentsPerChunk);
}
