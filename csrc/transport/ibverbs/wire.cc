#include "transport/ibverbs/wire.h"

#include <cstring>

#include "common/error.h"

namespace rdmacoll {
namespace transport {
namespace ibverbs {
namespace wire {

namespace {

constexpr uint32_t kAddressMagic = 0x31494352;       // "RCI1" read little-endian
constexpr uint16_t kAddressVersion = 2;              // 2: the lanes field (RDMACOLL_IB_QPS_PER_CONNECTION)
constexpr uint32_t kRegionMagic = 0x31524952;        // "RIR1"
constexpr uint64_t kKeyTag = 0x6962766572627321ull;  // marks RemoteMemory filled by unpackRegion
enum : uint32_t { kKindAllocated = 1, kKindUser = 2 };

// Fixed-layout header; the QPN array follows it.
struct AddressHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  AddressFields f;
};
static_assert(sizeof(AddressHeader) == 44, "address header layout");

struct PackedRegion {
  uint32_t magic;
  int32_t owner;
  uint64_t addr;
  uint64_t len;
  uint32_t rkey;
  uint32_t kind;
};
static_assert(sizeof(PackedRegion) <= PackedMemory::kBytes, "packed region too large");

constexpr uint32_t kMaxQpn = (1u << 24) - 1;

std::string fromRank(int peer) { return "ibverbs: rank " + std::to_string(peer) + " sent "; }

}  // namespace

Bytes packAddress(const Address& a) {
  AddressHeader h{};
  h.magic = kAddressMagic;
  h.version = kAddressVersion;
  h.f = a;
  Bytes out(sizeof(h) + a.qpn.size() * sizeof(uint32_t));
  std::memcpy(out.data(), &h, sizeof(h));
  if (!a.qpn.empty()) std::memcpy(out.data() + sizeof(h), a.qpn.data(), a.qpn.size() * sizeof(uint32_t));
  return out;
}

Address unpackAddress(const Bytes& bytes, int peer, int self, int expectSize, int expectLanes) {
  AddressHeader h;
  if (bytes.size() < sizeof(h)) {
    throw Error(fromRank(peer) + "a " + std::to_string(bytes.size()) + "-byte address, shorter than its header");
  }
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.magic != kAddressMagic) {
    throw Error(fromRank(peer) +
                "an address that is not an ibverbs address (does every rank use "
                "RDMACOLL_TRANSPORT=ibverbs?)");
  }
  if (h.version != kAddressVersion) {
    throw Error(fromRank(peer) + "address version " + std::to_string(h.version) + ", this rank speaks " +
                std::to_string(kAddressVersion) + ": the ranks run different rdmacoll versions");
  }
  if (h.f.rank != peer || h.f.size != expectSize) {
    throw Error(fromRank(peer) + "an address for rank " + std::to_string(h.f.rank) + " of " + std::to_string(h.f.size) +
                ", expected rank " + std::to_string(peer) + " of " + std::to_string(expectSize));
  }
  if (expectLanes < 1) throw Error("ibverbs: " + std::to_string(expectLanes) + " queue pairs per peer");
  if (h.f.lanes != expectLanes) {
    throw Error(fromRank(peer) + "an address with " + std::to_string(h.f.lanes) +
                " queue pairs per peer, this rank has " + std::to_string(expectLanes) +
                ": set the same RDMACOLL_IB_QPS_PER_CONNECTION on every rank");
  }
  const size_t lanes = static_cast<size_t>(expectLanes);
  const size_t want = sizeof(h) + static_cast<size_t>(expectSize) * lanes * sizeof(uint32_t);
  if (bytes.size() != want) {
    throw Error(fromRank(peer) + "a " + std::to_string(bytes.size()) + "-byte address, expected " +
                std::to_string(want));
  }
  const AddressFields& f = h.f;
  if (f.linkLayer != kInfiniBand && f.linkLayer != kEthernet) {
    throw Error(fromRank(peer) + "unknown link layer " + std::to_string(f.linkLayer));
  }
  if (f.mtu < 1 || f.mtu > 5) throw Error(fromRank(peer) + "invalid MTU code " + std::to_string(f.mtu));
  if (f.psn > kMaxQpn) throw Error(fromRank(peer) + "a packet sequence number wider than 24 bits");
  if (f.port == 0) throw Error(fromRank(peer) + "port number 0");
  if (self < 0 || self >= expectSize) throw Error("ibverbs: own rank " + std::to_string(self) + " out of range");
  Address a;
  static_cast<AddressFields&>(a) = f;
  a.qpn.resize(static_cast<size_t>(expectSize) * lanes);
  std::memcpy(a.qpn.data(), bytes.data() + sizeof(h), a.qpn.size() * sizeof(uint32_t));
  for (size_t l = 0; l < lanes; ++l) {
    const uint32_t q = a.qpn[static_cast<size_t>(self) * lanes + l];
    if (q == 0 || q > kMaxQpn) {
      throw Error(fromRank(peer) + "queue pair number " + std::to_string(q) + " for rank " + std::to_string(self));
    }
  }
  if (a.linkLayer == kInfiniBand && (a.lid == 0 || a.lid >= 0xc000)) {
    throw Error(fromRank(peer) + "InfiniBand LID " + std::to_string(a.lid) +
                " (0 or multicast: is a subnet manager running on that fabric?)");
  }
  if (a.linkLayer == kEthernet) {
    bool zero = true;
    for (uint8_t b : a.gid) zero = zero && b == 0;
    if (zero) throw Error(fromRank(peer) + "an all-zero GID for a RoCE port");
  }
  return a;
}

void packRegion(const Region& r, PackedMemory* out) {
  PackedRegion p{kRegionMagic, r.owner, r.addr, r.len, r.rkey, r.allocated ? kKindAllocated : kKindUser};
  std::memset(out->bytes, 0, sizeof(out->bytes));
  std::memcpy(out->bytes, &p, sizeof(p));
}

void unpackRegion(const PackedMemory& packed, int peer, RemoteMemory* out) {
  PackedRegion p;
  std::memcpy(&p, packed.bytes, sizeof(p));
  const char* fault = nullptr;
  if (p.magic != kRegionMagic) {
    fault = "is not an ibverbs region";
  } else if (p.kind != kKindAllocated && p.kind != kKindUser) {
    fault = "has an unknown kind";
  } else if (p.owner != peer) {
    fault = "belongs to another rank";
  } else if (p.len > kMaxRegionBytes) {
    fault = "has an impossible length";
  } else if (p.addr > UINT64_MAX - p.len) {
    fault = "wraps around the address space";
  }
  if (fault) {
    throw Error("ibverbs: malformed memory descriptor from rank " + std::to_string(peer) + ": it " + fault);
  }
  out->len = static_cast<size_t>(p.len);
  out->allocated = p.kind == kKindAllocated;
  out->key[0] = p.addr;
  out->key[1] = p.rkey;
  out->key[2] = static_cast<uint64_t>(static_cast<uint32_t>(peer));
  out->key[3] = kKeyTag;
  out->mapped = nullptr;
}

void checkRemote(const RemoteMemory& m, int peer, size_t off, size_t len, const char* what, size_t align) {
  if (m.key[3] != kKeyTag || m.key[2] != static_cast<uint64_t>(static_cast<uint32_t>(peer))) {
    throw Error(std::string("ibverbs: ") + what + " to rank " + std::to_string(peer) +
                " names memory that was not unpacked by this endpoint");
  }
  if (m.len > kMaxRegionBytes || m.key[0] > UINT64_MAX - m.len) {
    throw Error(std::string("ibverbs: ") + what + " to rank " + std::to_string(peer) + ": corrupt region");
  }
  if (off > m.len || len > m.len - off) {
    throw Error(std::string("ibverbs: ") + what + " of " + std::to_string(len) + " bytes at offset " +
                std::to_string(off) + " is outside rank " + std::to_string(peer) + "'s " + std::to_string(m.len) +
                "-byte region");
  }
  if (align > 1 && (m.key[0] + off) % align != 0) {
    throw Error(std::string("ibverbs: ") + what + " to rank " + std::to_string(peer) + " at offset " +
                std::to_string(off) + ": the address is not " + std::to_string(align) + "-byte aligned");
  }
}

}  // namespace wire
}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
