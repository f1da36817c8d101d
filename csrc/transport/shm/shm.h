// Same-host transport: peers' allocated memory is mapped (memfd), user memory is reached
// by cross-memory attach (process_vm_readv/writev, bounds-checked against what the owner
// packed: no rkey protects it), immediates travel through per-peer rings in the
// receiver's device segment, and sleepers are woken with a futex on that segment.
//
// Device segment (one per process, mapped by every local peer):
//   [Header: doorbell, sleepers][Ring for immediates from rank 0][... from rank size-1]
// A ring holds kRingEntries 64-bit entries ((k+1) << 32 | imm for the k-th immediate) and
// the consumer's count `head`, which producers read to avoid overwriting.
//
// Writes into a peer's mapping by measurement (copyIntoMapping): a plain copy takes every
// destination line from the cache that holds it, which is slow when that is a far core
// (another L3 domain: another socket, or another CCX of a VM's vCPUs) and the peer has just
// read the lines (a slot); non-temporal stores skip taking them, at the price of the
// reader's miss. So a copy of kMeasuredCopyBytes or more is timed: two in a row slower
// than kSlowBytesPerNs turn the next kStreamedCopies to this peer into non-temporal
// stores, after which plain ones are timed again. Measured: docs/transports.md, "shm".
#pragma once
#include <sys/types.h>

#include <atomic>
#include <memory>
#include <unordered_map>

#include "transport/shm/segment.h"
#include "transport/transport.h"

namespace rdmacoll {
namespace transport {
namespace shm {

constexpr uint32_t kRingEntries = 1024;

struct alignas(64) DeviceHeader {
  std::atomic<uint32_t> doorbell;  // futex word, bumped by a producer that saw sleepers
  std::atomic<uint32_t> sleepers;
};

struct alignas(64) Ring {
  std::atomic<uint64_t> head;  // immediates consumed so far (owner writes)
  char pad[56];
  std::atomic<uint64_t> entries[kRingEntries];
};

class ShmDevice;

class ShmMemory : public Memory {
 public:
  // Allocated: owns its segment.
  ShmMemory(Segment seg);
  // Registered user memory: nothing owned.
  ShmMemory(void* ptr, size_t len);
  void pack(PackedMemory* out) const override;
  bool discardable() const override { return allocated_; }
  void discard(size_t off, size_t len) override;  // a hole punched in the memfd

 private:
  Segment seg_;
  bool allocated_;
};

class ShmEndpoint : public Endpoint {
 public:
  ShmEndpoint(ShmDevice* dev, int peer, pid_t pid, Segment peerDeviceSeg);
  ~ShmEndpoint() override;
  uint32_t capabilities() const override { return kCanRead | kCanMap; }
  void unpack(const PackedMemory& packed, RemoteMemory* out) override;
  uint64_t write(const void* src, const RemoteMemory& dst, size_t dstOff, size_t len, bool hasImm,
                 uint32_t imm) override;
  void put64(const RemoteMemory& dst, size_t dstOff, uint64_t value) override;
  bool pollImmediate(uint32_t* imm) override;
  void read(const RemoteMemory& src, size_t srcOff, void* dst, size_t len) override;
  void* map(RemoteMemory* mem) override;
  bool alive() override;
  std::string describe() const override;

 private:
  void wakePeer();
  void checkBounds(const RemoteMemory& m, size_t off, size_t len, const char* what) const;
  void cmaTransfer(const RemoteMemory& m, size_t off, void* local, size_t len, bool toPeer);
  void copyIntoMapping(char* dst, const void* src, size_t len);

  ShmDevice* dev_;
  int peer_;
  pid_t pid_;
  int pidfd_ = -1;
  bool dead_ = false;
  Segment peerSeg_;                               // the peer's device segment
  DeviceHeader* peerHeader_;                      // its header
  Ring* outRing_;                                 // my ring inside the peer's segment (I produce)
  Ring* inRing_;                                  // the peer's ring inside my segment (I consume)
  uint64_t sent_ = 0;                             // immediates produced into outRing_
  uint64_t headSeen_ = 0;                         // the consumer's head when last read (it only grows)
  uint64_t received_ = 0;                         // immediates consumed from inRing_
  std::unordered_map<uint64_t, Segment> mapped_;  // peer segment id -> my mapping
  int streamedLeft_ = 0;                          // copies into the peer's mappings still streamed
  int slowCopies_ = 0;                            // plain ones measured slow in a row
};

class ShmDevice : public Device {
 public:
  ShmDevice(int rank, int size);
  const char* name() const override { return "shm"; }
  std::unique_ptr<Memory> allocate(size_t len) override;
  std::unique_ptr<Memory> registerMemory(void* ptr, size_t len) override;
  bool cheapRegistration() const override { return true; }
  void packUser(const void* ptr, size_t len, PackedMemory* out) override;
  Bytes address() const override;
  std::unique_ptr<Endpoint> connect(int peer, const Bytes& peerAddress) override;
  uint64_t prepareSleep() override;
  void cancelSleep() override;
  void sleep(uint64_t seen, int timeoutMs) override;
  void wakeSleepers() override;

  int rank() const { return rank_; }
  Ring* ring(int fromRank) const;

 private:
  int rank_;
  int size_;
  uint64_t nextSegmentId_ = 1;
  Segment seg_;
  DeviceHeader* header_;
};

}  // namespace shm
}  // namespace transport
}  // namespace rdmacoll
