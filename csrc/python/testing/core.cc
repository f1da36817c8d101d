// Test hook of the core without ranks: the descriptor hash. (The fork guard's count is
// _core.fork_tracked_fds: its registry is process state of _core's copy of the core.)
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "comm/call.h"
#include "common/error.h"
#include "python/testing/hooks.h"

namespace py = pybind11;
using namespace rdmacoll;

void bindTestingCore(py::module_& m) {
  m.def("hash_descriptor", [](int coll, uint64_t seq, int dtype, uint64_t count, int op, int root, uint32_t nameHash,
                              int algo, uint64_t seg, uint32_t shapeHash) {
    Descriptor d;
    d.collective = static_cast<uint8_t>(coll);
    d.seq = seq;
    d.dtype = static_cast<uint8_t>(dtype);
    d.count = count;
    d.op = static_cast<uint8_t>(op);
    d.root = root;
    d.nameHash = nameHash;
    d.algorithm = static_cast<uint8_t>(algo);
    d.segmentBytes = seg;
    d.shapeHash = shapeHash;
    return hashDescriptor(d);
  });
}
