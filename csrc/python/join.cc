#include "python/join.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "comm/call.h"
#include "common/error.h"
#include "python/arrays.h"

namespace py = pybind11;

namespace rdmacoll {

namespace {

// A call a peer started, as a rank in join() sees it.
struct PeerCall {
  Descriptor d;
};

}  // namespace

void standIn(Group& g, py::handle obj) {
  const Descriptor& d = obj.cast<const PeerCall&>().d;
  if (d.dtype >= kNumDataTypes) throw Error("join(): a peer's call has an unknown dtype");
  Request req;
  req.collective = static_cast<Collective>(d.collective);
  req.dtype = static_cast<DataType>(d.dtype);
  req.op = static_cast<ReduceOp>(d.op);
  req.root = d.root;
  req.like = &d;
  req.name = d.name;  // (named: a call of another thread beside it is not taken for a clash)
  req.nameLen = strnlen(d.name, sizeof(d.name));
  req.count = d.count;
  std::vector<char> zeros;
  std::vector<uint64_t> splits, received;
  PoolResult result(g.comm().pool());
  switch (req.collective) {
    case Collective::kAllreduce:
    case Collective::kBroadcast:
      zeros.assign(std::max<size_t>(1, d.count * dtypeSize(req.dtype)), 0);
      req.in = req.out = zeros.data();
      break;
    case Collective::kAllgather:
      req.in = &d;  // (no rows: never read)
      req.result = &result;
      break;
    case Collective::kAlltoall:
      splits.assign(static_cast<size_t>(g.comm().size()), 0);  // (what peers send it: their headers say)
      received.assign(splits.size(), 0);
      req.in = &d;
      req.splits = splits.data();
      req.received = received.data();
      req.result = &result;
      break;
    case Collective::kBarrier:
      break;
    default:
      throw Error(std::string("join(): a rank in join() cannot take part in ") + collectiveName(req.collective) +
                  ", which another rank started as " + describeCall(d));
  }
  try {
    g.run(req);
  } catch (const Interrupted&) {
    throw py::error_already_set();  // the KeyboardInterrupt the signal handler set
  }
}

py::object joinWait(Group& g, uint64_t episode) {
  PeerCall call;
  HashedDescriptor theirs{};
  try {
    if (!g.awaitCall(episode, &theirs)) return py::none();
  } catch (const Interrupted&) {
    throw py::error_already_set();  // the KeyboardInterrupt the signal handler set
  }
  call.d = theirs.desc;
  return py::cast(call);
}

void bindPeerCall(py::module_& m) {
  py::class_<PeerCall>(m, "PeerCall", "A call a peer started, as a rank in join() sees it (Communicator.join_wait)")
      .def_property_readonly(
          "collective",
          [](const PeerCall& c) {
            const bool known = c.d.collective >= 1 && c.d.collective <= 6;
            return std::string(known ? collectiveName(static_cast<Collective>(c.d.collective)) : "?");
          })
      .def_property_readonly("op", [](const PeerCall& c) { return static_cast<int>(c.d.op); })
      .def_property_readonly("count", [](const PeerCall& c) { return c.d.count; })
      .def_property_readonly("root", [](const PeerCall& c) { return c.d.root; })
      .def_property_readonly("seq", [](const PeerCall& c) { return c.d.seq; })
      .def_property_readonly(
          "name", [](const PeerCall& c) { return py::bytes(c.d.name, strnlen(c.d.name, sizeof(c.d.name))); },
          "The name's first bytes (up to 15), as bytes")
      .def("__repr__", [](const PeerCall& c) { return "<PeerCall " + describeCall(c.d) + ">"; });
}

}  // namespace rdmacoll
