// What the ibverbs transport sends to peers, and the checks on what it receives: the
// device address blob, the packed form of a registered region, and the validation of a
// RemoteMemory before a work request names it. Pure code (no verbs header, no device):
// compiled on every build and unit-tested without RDMA hardware (tests/test_ibverbs.py).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace rdmacoll {
namespace transport {
namespace ibverbs {
namespace wire {

// Link layers, numbered like IBV_LINK_LAYER_*.
enum LinkLayer : uint8_t { kInfiniBand = 1, kEthernet = 2 };

// One device's address: how to reach its port, and the queue pairs it created for each
// peer: `lanes` of them per peer (RDMACOLL_IB_QPS_PER_CONNECTION), qpn[r * lanes + l] the
// QP of lane l this device dedicates to rank r (0 for its own rank).
struct AddressFields {  // travels as it is laid out here, after a magic and a version
  int32_t rank = 0;
  int32_t size = 0;
  uint8_t linkLayer = kInfiniBand;
  uint8_t port = 1;
  uint8_t mtu = 0;       // enum ibv_mtu: 1 (256 B) .. 5 (4096 B)
  uint8_t gidIndex = 0;  // the sender's own GID index (informational)
  uint16_t lid = 0;      // InfiniBand: the port's LID
  uint16_t lanes = 1;    // queue pairs per peer
  uint32_t psn = 0;      // first packet sequence number of every QP of this device (24 bits)
  uint8_t gid[16] = {};  // RoCE: the GID peers address (InfiniBand: for the record)
};
struct Address : AddressFields {
  std::vector<uint32_t> qpn;
};

Bytes packAddress(const Address& a);
// Parse and validate a peer's address: exact length, magic and version, rank == peer,
// size == expectSize, lanes == expectLanes, valid MTU / PSN / link layer, non-zero QPNs for
// `self`, a LID (InfiniBand) or a non-zero GID (Ethernet). Throws Error naming the peer and
// the fault.
Address unpackAddress(const Bytes& bytes, int peer, int self, int expectSize, int expectLanes = 1);

// A registered region as peers see it.
struct Region {
  int32_t owner = 0;  // rank that registered it
  bool allocated = false;
  uint64_t addr = 0;
  uint64_t len = 0;
  uint32_t rkey = 0;
};
void packRegion(const Region& r, PackedMemory* out);
// Validates magic, kind, owner == peer, length and address range; fills `out` with the
// keys checkRemote expects (key[0] addr, key[1] rkey, key[2] owner, key[3] tag).
void unpackRegion(const PackedMemory& packed, int peer, RemoteMemory* out);

// Before a work request names `m`: it was filled by unpackRegion for this peer (not by
// another backend or endpoint), [off, off+len) lies inside it, and the target address is a
// multiple of `align` (8 for put64). Throws Error naming the operation and the peer.
void checkRemote(const RemoteMemory& m, int peer, size_t off, size_t len, const char* what, size_t align = 1);

constexpr size_t kMaxRegionBytes = size_t(1) << 48;  // larger "lengths" are garbage

}  // namespace wire
}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
