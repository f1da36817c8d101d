// Test hooks of the core without ranks: the descriptor hash, HMAC-SHA256. (The fork guard's count is
// _core.fork_tracked_fds: its registry is process state of _core's copy of the core.)
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "comm/call.h"
#include "common/error.h"
#include "common/sha256.h"
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
  m.def("hmac_sha256", [](const py::bytes& key, const py::bytes& msg) {
    const std::string k = key, s = msg;
    Digest d = hmacSha256(k.data(), k.size(), s.data(), s.size());
    return py::bytes(reinterpret_cast<const char*>(d.data()), d.size());
  });
}
