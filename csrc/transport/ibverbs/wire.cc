#include "transport/ibverbs/wire.h"

#include <cstring>

#include "common/error.h"

namespace rdmacoll {
namespace transport {
namespace ibverbs {
namespace wire {

namespace {

constexpr uint32_t kAddressMagic = 0x31494352;       // "RCI1" read little-endian
constexpr uint16_t kAddressVersion = 3;              // 2: lanes (RDMACOLL_IB_QPS_PER_CONNECTION); 3: rails
constexpr uint16_t kRegionMagic = 0x3252;            // "R2" (2: a key per rail)
constexpr uint64_t kKeyTag = 0x6962766572627321ull;  // marks RemoteMemory filled by unpackRegion
enum : uint8_t { kKindAllocated = 1, kKindUser = 2 };

// Fixed-layout header; the rails' addresses follow it, then the QPN array.
struct AddressHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  AddressFields f;
};
static_assert(sizeof(AddressHeader) == 24, "address header layout");
static_assert(sizeof(RailAddress) == 24, "rail address layout");

struct PackedRegion {
  uint16_t magic;
  uint8_t kind;
  uint8_t rails;
  int32_t owner;
  uint64_t addr;
  uint64_t len;
  uint32_t rkey[kMaxRails];
};
static_assert(sizeof(PackedRegion) <= PackedMemory::kBytes / 2, "packed region larger than hybrid's half");

constexpr uint32_t kMaxQpn = (1u << 24) - 1;

std::string fromRank(int peer) { return "ibverbs: rank " + std::to_string(peer) + " sent "; }

}  // namespace

Bytes packAddress(const Address& a) {
  AddressHeader h{};
  h.magic = kAddressMagic;
  h.version = kAddressVersion;
  h.f = a;
  h.f.rails = static_cast<uint8_t>(a.rail.size());
  const size_t railBytes = a.rail.size() * sizeof(RailAddress);
  Bytes out(sizeof(h) + railBytes + a.qpn.size() * sizeof(uint32_t));
  std::memcpy(out.data(), &h, sizeof(h));
  if (railBytes) std::memcpy(out.data() + sizeof(h), a.rail.data(), railBytes);
  if (!a.qpn.empty()) std::memcpy(out.data() + sizeof(h) + railBytes, a.qpn.data(), a.qpn.size() * sizeof(uint32_t));
  return out;
}

Address unpackAddress(const Bytes& bytes, int peer, int self, int expectSize) {
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
  const AddressFields& f = h.f;
  if (f.rails < 1 || f.rails > kMaxRails) {
    throw Error(fromRank(peer) + "an address with " + std::to_string(f.rails) + " rails (1 to " +
                std::to_string(kMaxRails) + ")");
  }
  if (f.lanes < f.rails || f.lanes > kMaxLanes) {
    throw Error(fromRank(peer) + "an address with " + std::to_string(f.lanes) + " queue pairs per peer on " +
                std::to_string(f.rails) + " rails (" + std::to_string(f.rails) + " to " + std::to_string(kMaxLanes) +
                ")");
  }
  const size_t lanes = f.lanes, rails = f.rails;
  const size_t want =
      sizeof(h) + rails * sizeof(RailAddress) + static_cast<size_t>(expectSize) * lanes * sizeof(uint32_t);
  if (bytes.size() != want) {
    throw Error(fromRank(peer) + "a " + std::to_string(bytes.size()) + "-byte address, expected " +
                std::to_string(want));
  }
  if (f.linkLayer != kInfiniBand && f.linkLayer != kEthernet) {
    throw Error(fromRank(peer) + "unknown link layer " + std::to_string(f.linkLayer));
  }
  if (f.psn > kMaxQpn) throw Error(fromRank(peer) + "a packet sequence number wider than 24 bits");
  if (self < 0 || self >= expectSize) throw Error("ibverbs: own rank " + std::to_string(self) + " out of range");
  Address a;
  static_cast<AddressFields&>(a) = f;
  a.rail.resize(rails);
  std::memcpy(a.rail.data(), bytes.data() + sizeof(h), rails * sizeof(RailAddress));
  a.qpn.resize(static_cast<size_t>(expectSize) * lanes);
  std::memcpy(a.qpn.data(), bytes.data() + sizeof(h) + rails * sizeof(RailAddress), a.qpn.size() * sizeof(uint32_t));
  for (size_t l = 0; l < lanes; ++l) {
    const uint32_t q = a.qpn[static_cast<size_t>(self) * lanes + l];
    if (q == 0 || q > kMaxQpn) {
      throw Error(fromRank(peer) + "queue pair number " + std::to_string(q) + " for rank " + std::to_string(self));
    }
  }
  for (size_t r = 0; r < rails; ++r) {
    const RailAddress& ra = a.rail[r];
    const std::string where = rails > 1 ? " (rail " + std::to_string(r) + ")" : "";
    if (ra.mtu < 1 || ra.mtu > 5) throw Error(fromRank(peer) + "invalid MTU code " + std::to_string(ra.mtu) + where);
    if (ra.port == 0) throw Error(fromRank(peer) + "port number 0" + where);
    if (a.linkLayer == kInfiniBand && (ra.lid == 0 || ra.lid >= 0xc000)) {
      throw Error(fromRank(peer) + "InfiniBand LID " + std::to_string(ra.lid) + where +
                  " (0 or multicast: is a subnet manager running on that fabric?)");
    }
    if (a.linkLayer == kEthernet) {
      bool zero = true;
      for (uint8_t b : ra.gid) zero = zero && b == 0;
      if (zero) throw Error(fromRank(peer) + "an all-zero GID for a RoCE port" + where);
    }
  }
  return a;
}

void packRegion(const Region& r, PackedMemory* out) {
  PackedRegion p{kRegionMagic, r.allocated ? kKindAllocated : kKindUser, r.rails, r.owner, r.addr, r.len, {}};
  for (int i = 0; i < kMaxRails; ++i) p.rkey[i] = r.rkey[i];
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
  } else if (p.rails < 1 || p.rails > kMaxRails) {
    fault = "has an impossible number of rails";
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
  out->key[1] = p.rkey[0] | static_cast<uint64_t>(p.rkey[p.rails - 1]) << 32;
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
