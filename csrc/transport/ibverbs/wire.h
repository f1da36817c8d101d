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

// Rails: the ports a process uses at once (RDMACOLL_IB_HCA; port.h), each with its own
// device context, protection domain and memory keys. A region's descriptor carries one
// remote key per rail in its 32 bytes (half a PackedMemory, which hybrid/ shares), so at most:
constexpr int kMaxRails = 2;
// Queue pairs per peer at most (RDMACOLL_IB_QPS_PER_CONNECTION's own limit).
constexpr int kMaxLanes = 16;

// One rail's port as peers address it.
struct RailAddress {  // travels as it is laid out here
  uint8_t port = 1;
  uint8_t mtu = 0;       // enum ibv_mtu: 1 (256 B) .. 5 (4096 B)
  uint8_t gidIndex = 0;  // the sender's own GID index (informational)
  uint8_t reserved = 0;
  uint16_t lid = 0;  // InfiniBand: the port's LID
  uint16_t reserved2 = 0;
  uint8_t gid[16] = {};  // RoCE: the GID peers address (InfiniBand: for the record)
};

// One device's address: its rails, and the queue pairs it created for each peer: `lanes`
// of them per peer (RDMACOLL_IB_QPS_PER_CONNECTION, at least one per rail), qpn[r * lanes
// + l] the QP of lane l this device dedicates to rank r (0 for its own rank), on rail
// l % rails.
struct AddressFields {  // travels as it is laid out here, after a magic and a version
  int32_t rank = 0;
  int32_t size = 0;
  uint8_t linkLayer = kInfiniBand;  // every rail's
  uint8_t rails = 1;
  uint16_t lanes = 1;  // queue pairs per peer
  uint32_t psn = 0;    // first packet sequence number of every QP of this device (24 bits)
};
struct Address : AddressFields {
  std::vector<RailAddress> rail;  // [rails]
  std::vector<uint32_t> qpn;      // [size * lanes]
};

Bytes packAddress(const Address& a);
// Parse and validate a peer's address: exact length, magic and version, rank == peer,
// size == expectSize, 1..kMaxRails rails, lanes from rails to kMaxLanes, valid MTU / PSN /
// link layer, non-zero QPNs for `self`, a LID (InfiniBand) or a non-zero GID (Ethernet)
// on every rail. Throws Error naming the peer and the fault. (Ranks may have different
// rails and so different lanes: a connection uses the lanes both have.)
Address unpackAddress(const Bytes& bytes, int peer, int self, int expectSize);

// A registered region as peers see it: its key on each of the owner's rails.
struct Region {
  int32_t owner = 0;  // rank that registered it
  bool allocated = false;
  uint64_t addr = 0;
  uint64_t len = 0;
  uint8_t rails = 1;
  uint32_t rkey[kMaxRails] = {};  // [rail]
};
void packRegion(const Region& r, PackedMemory* out);
// Validates magic, kind, owner == peer, length and address range; fills `out` with the
// keys checkRemote expects (key[0] addr, key[1] rail 0's rkey | rail 1's << 32 (rail 0's
// again where the peer has one rail), key[2] owner, key[3] tag); rkeyOf reads them.
void unpackRegion(const PackedMemory& packed, int peer, RemoteMemory* out);
inline uint32_t rkeyOf(const RemoteMemory& m, int rail) { return static_cast<uint32_t>(m.key[1] >> (32 * (rail & 1))); }

// Before a work request names `m`: it was filled by unpackRegion for this peer (not by
// another backend or endpoint), [off, off+len) lies inside it, and the target address is a
// multiple of `align` (8 for put64). Throws Error naming the operation and the peer.
void checkRemote(const RemoteMemory& m, int peer, size_t off, size_t len, const char* what, size_t align = 1);

constexpr size_t kMaxRegionBytes = size_t(1) << 48;  // larger "lengths" are garbage

}  // namespace wire
}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
