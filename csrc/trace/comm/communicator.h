// The Communicator the algorithms see when they are traced (trace/recorder.h): the same
// names and signatures as comm/communicator.h, holding no connection and no memory. Found
// before comm/communicator.h because the trace build puts csrc/trace first on the include
// path; everything else the algorithms include (comm/call.h, comm/pool.h, comm/protocol.h,
// comm/topology.h, comm/primitives.h, comm/ring.h, comm/pairwise.h, reduce/reduce.h) is the
// core's own, its functions defined again by trace/primitives.cc and trace/communicator.cc.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/call.h"
#include "comm/ctrl.h"
#include "comm/pool.h"
#include "comm/protocol.h"
#include "comm/topology.h"
#include "common/types.h"
#include "transport/transport.h"

namespace rdmacoll {

struct Peer {
  int rank = -1;
  uint64_t msgsSent = 0;      // slot messages put to this peer
  uint64_t msgsReceived = 0;  // slot messages awaited from it
  uint64_t received[8] = {};  // awaits per flow (rdmacoll_trace::Flow)
};

struct BufferRef {
  const void* ptr = nullptr;
  size_t bytes = 0;
  bool allocated = false;
  transport::PackedMemory packed{};
  uint64_t offset = 0;
};

class Communicator {
 public:
  Communicator(int rank, int size, const Protocol& protocol, const std::vector<int>& hostOf, bool readable,
               bool mappable);
  int rank() const { return rank_; }
  int size() const { return size_; }
  const Protocol& protocol() const { return protocol_; }
  const schedule::Hierarchy& topology() const { return topology_; }
  bool peersReadable() const { return readable_; }
  bool peersMappable() const { return mappable_; }
  Peer& peer(int r) { return peers_[r]; }
  std::shared_ptr<MemoryPool> pool() const { return pool_; }
  // Staging segments: addresses that are never dereferenced (the traced kernels record).
  void* staging(int i) const;
  bool describeBuffer(const void* p, size_t bytes, BufferRef* ref) const;
  // A call header as peers would send it (no buffer is ever user memory in a trace).
  const CallHeader& header() const { return header_; }

 private:
  int rank_, size_;
  Protocol protocol_;
  schedule::Hierarchy topology_;
  bool readable_, mappable_;
  std::vector<Peer> peers_;
  std::shared_ptr<MemoryPool> pool_;
  CallHeader header_{};
};

}  // namespace rdmacoll
