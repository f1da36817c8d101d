// join's part of _core.Communicator (comm/join.cc; the protocol: rdmacoll/frameworks/_join.py):
// the PeerCall class (the call a peer started, as a rank in join() sees it), the wait for
// one and the stand-in. group.cc binds them as Communicator methods.
#pragma once
#include <pybind11/pybind11.h>

#include <cstdint>

#include "runtime/group.h"

namespace rdmacoll {

void bindPeerCall(pybind11::module_& m);
// The next call a peer started (a PeerCall), or None once every rank entered join `episode` times.
pybind11::object joinWait(Group& g, uint64_t episode);
// Runs the PeerCall `call` with this rank's part empty: an allreduce or broadcast of zeros
// (count elements), an allgather or alltoall of no rows, a barrier.
void standIn(Group& g, pybind11::handle call);

}  // namespace rdmacoll
