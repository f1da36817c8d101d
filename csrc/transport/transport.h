// The one-sided transport contract (see docs/design.md, "The transport contract").
//
// Everything above transport/ talks to peers only through these four classes; no
// backend name appears above this directory. The model is RDMA verbs:
//
//   Device      one per Communicator. Owns local memory (allocate/register), produces the
//               address blob that bootstrap exchanges, and creates one Endpoint per peer.
//   Memory      a local region a peer can reach: library-owned (allocate) or the user's
//               own (registerMemory). pack() gives the bytes a peer needs to reach it.
//   RemoteMemory  a peer's Memory, rebuilt from its packed bytes (Endpoint::unpack).
//   Endpoint    the connection to one peer: one-sided writes with an immediate, 64-bit
//               puts, optional read/map, in-order delivery of immediates.
//
// Ownership: Device outlives its Memory and Endpoints (the Communicator holds them in
// that order). Memory returned by allocate() is owned by the caller (unique_ptr) and is
// unmapped when destroyed; peers that mapped it keep their own mapping alive until they
// drop it. registerMemory() never owns the user's bytes: the caller keeps them alive and
// unchanged in place while any peer may still access them.
//
// Visibility (the only ordering guarantee): when the peer consumes the immediate of
// write k on an endpoint (pollImmediate), the payloads of all writes and puts up to k on
// that endpoint are visible in its memory. Algorithms never poll payload bytes.
//
// Blocking: nothing here blocks on the peer except where stated. write() and put64()
// are posted: they return as soon as the transport has taken the request. A write whose
// immediate would overflow the peer's immediate queue waits for space; the layer above
// sizes its credits so that this does not happen in practice.
//
// Deferred completion: write() returns a ticket. The source bytes stay the transport's
// until the write has left them: waitWritten(ticket) returns once it has (and every
// earlier write on that endpoint with it: tickets complete in order). A write that
// copied its source before returning (shm and tcp always; ibverbs for inline data and
// for sources outside this Device's memory, which it stages) returns 0, done at once.
// So a caller keeps many writes in flight from its registered memory and learns per
// endpoint when a source may be reused; it must not change a source, nor hand it back to
// its owner, before then. A peer's consumption of a write's immediate also proves that
// the write left its source (RC: the bytes were placed before the immediate).
//
// Threads: one thread at a time per Device (the Communicator's lock), except put64,
// which may be called from any thread (abort words).
//
// Errors: failures throw rdmacoll::Error with the cause (errno text, peer rank).
// A dead peer is reported by Endpoint::alive() == false (shm: pidfd; tcp: EOF/RST;
// ibverbs: completion errors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/options.h"

namespace rdmacoll {
namespace transport {

using Bytes = std::vector<uint8_t>;

// What an endpoint can do beyond write/put64.
enum Capability : uint32_t {
  kCanRead = 1u << 0,  // read() works for every RemoteMemory of this endpoint
  kCanMap = 1u << 1,   // map() gives load/store pointers into the peer's *allocated* memory
  // write() moves the bytes without this process's CPUs (a NIC): several writes in flight
  // hide the link's round trip instead of spreading the same CPU work thinner
  kOffloadsWrites = 1u << 2,
};

// The packed form of a Memory: what travels to peers. Fixed size, no allocation.
struct PackedMemory {
  static constexpr size_t kBytes = 64;  // two backends' forms of 32 (hybrid/)
  uint8_t bytes[kBytes];
};

class Memory {
 public:
  virtual ~Memory() = default;
  void* data() const { return ptr_; }
  size_t size() const { return len_; }
  // Bytes a peer passes to Endpoint::unpack to reach this region; contains nothing the
  // peer dereferences without a bounds check.
  virtual void pack(PackedMemory* out) const = 0;
  // Giving pages back (the memory pool, when much of it lies free): discard() returns the
  // pages of [off, off+len) (page-aligned) to the system, peers' mappings of them
  // included; they read as zeros when next touched, and touching them faults in fresh
  // pages. Only where that is safe: allocated memory that peers reach through mappings
  // or by copies, never memory a device pinned (an RDMA registration keeps the old pages).
  virtual bool discardable() const { return false; }
  virtual void discard(size_t off, size_t len);

 protected:
  Memory(void* ptr, size_t len) : ptr_(ptr), len_(len) {}
  void* ptr_;
  size_t len_;
};

// A peer's Memory as this process sees it: filled in place by Endpoint::unpack (no
// allocation), interpreted only by the backend that filled it.
struct RemoteMemory {
  size_t len = 0;
  bool allocated = false;  // library-owned on the peer (mappable where kCanMap)
  uint64_t key[4] = {};    // backend-specific identity (shm: pid, fd, segment id, address)
  void* mapped = nullptr;  // set by Endpoint::map
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;
  virtual uint32_t capabilities() const = 0;

  // Rebuild a peer's Memory from its pack() bytes. Validates the bytes (size, kind,
  // owner); throws Error on garbage, never trusts lengths it cannot check.
  virtual void unpack(const PackedMemory& packed, RemoteMemory* out) = 0;

  // One-sided write of len bytes from local src to dst+dstOff, then delivery of the
  // 32-bit immediate `imm` (hasImm) to the peer. len may be 0 (immediate only). Bounds
  // are checked against dst. Returns its ticket (0: src may be reused at once).
  virtual uint64_t write(const void* src, const RemoteMemory& dst, size_t dstOff, size_t len, bool hasImm,
                         uint32_t imm) = 0;
  // Until the write with this ticket (and every earlier one) has left its source; throws
  // Error when the endpoint failed first. 0 returns at once.
  virtual void waitWritten(uint64_t ticket) { (void)ticket; }

  // Store an 8-byte value at dst+dstOff (8-aligned), visible atomically (never torn).
  // Used for counters that only grow (credits, progress), read locally by the peer.
  // Ordered with writes on this endpoint. Wakes the peer if it sleeps.
  virtual void put64(const RemoteMemory& dst, size_t dstOff, uint64_t value) = 0;

  // Next immediate from this peer, in the order the peer wrote them. Non-blocking.
  virtual bool pollImmediate(uint32_t* imm) = 0;

  // kCanRead: copy len bytes from the peer's region into local dst. Bounds-checked.
  virtual void read(const RemoteMemory& src, size_t srcOff, void* dst, size_t len);

  // kCanMap: a pointer through which this process loads and stores the peer's allocated
  // region directly (valid while the RemoteMemory lives); nullptr when not mappable
  // (registered user memory, or a transport without the capability).
  virtual void* map(RemoteMemory* mem);

  // False once the peer is known to be dead or the connection failed.
  virtual bool alive() = 0;
  virtual std::string describe() const = 0;  // "shm pid 1234", for messages and logs
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const char* name() const = 0;

  // Library-owned memory peers can reach as cheaply as the transport allows.
  // Zero-filled and pre-faulted (no page fault when the hot path touches it).
  virtual std::unique_ptr<Memory> allocate(size_t len) = 0;
  // The user's memory, registered for as long as the returned Memory lives; the user keeps
  // ownership of the bytes.
  virtual std::unique_ptr<Memory> registerMemory(void* ptr, size_t len) = 0;
  // Whether user memory can be packed for peers per operation at no cost (shm: peers
  // reach it by cross-memory attach, no registration exists). Only then do algorithms
  // read peers' user memory in place; elsewhere user data moves through messages into
  // allocated receive slots (no hidden registration cache).
  virtual bool cheapRegistration() const { return false; }
  // Pack user memory for the duration of one operation, without allocating; only where
  // cheapRegistration() (else throws).
  virtual void packUser(const void* ptr, size_t len, PackedMemory* out);
  // The backends behind this device, by name: the one that reaches same-host peers in
  // place, and the one that carries messages between hosts ("" where there is none). The
  // cost model keys its constants by these names (a tuning file measured one of them).
  virtual std::string localBackend() const { return cheapRegistration() ? name() : ""; }
  virtual std::string networkBackend() const { return cheapRegistration() ? "" : name(); }
  // How long a waiter should keep polling (yielding the CPU between polls) before it
  // sleeps. Shared memory: a peer's store is seen by the next poll, so polling pays;
  // network: data arrives through a socket or completion queue another thread (or the
  // next poll) drains, and a yielding poller under load is scheduled last.
  virtual int pollMicros() const { return 2000; }

  // Non-empty when the device itself stopped working under us (an RDMA device removed
  // while in use), saying so: every rank whose device it is raises that, instead of
  // blaming its peers. Cheap enough for the waiters' periodic checks (~100 ms).
  virtual std::string failure() { return {}; }

  // Where this device listens for peers over a network, for logs: interface, address and
  // port ("eth0 10.0.0.2:41321"); "" when it listens on none.
  virtual std::string listenAddress() const { return {}; }

  // The bytes peers need to connect to this device (exchanged by bootstrap).
  virtual Bytes address() const = 0;
  // Setup: beginSetup, then connect() once per peer, then endSetup. `secret`: the job's
  // secret, the same bytes on every rank (bootstrap creates it and sends it through its
  // own channel); a backend that accepts connections lets in only those that prove it
  // (tcp/handshake.h). endSetup stops accepting (a listener closes) and returns what was
  // turned away, one line per connection, for the log.
  virtual void beginSetup(const Bytes& secret) { (void)secret; }
  virtual std::vector<std::string> endSetup() { return {}; }
  // Connect to `peer` given its address(). Called once per peer after the exchange.
  virtual std::unique_ptr<Endpoint> connect(int peer, const Bytes& peerAddress) = 0;

  // Sleeping: peers bump an event counter (and futex-wake, or the backend's equivalent)
  // when they deliver to this device while a thread of it sleeps. sleep returns early on
  // any event after `seen`, or after the timeout:
  //   seen = prepareSleep();  if (condition) cancelSleep(); else sleep(seen, ms);
  // Announcing before checking the condition is what makes the wake-up impossible to lose.
  virtual uint64_t prepareSleep() = 0;
  virtual void cancelSleep() = 0;
  virtual void sleep(uint64_t seen, int timeoutMs) = 0;

  // Two devices behind one sleeper (transport/hybrid): events of this device also wake
  // the sleepers of another. `hook` is called after every event that would end a
  // sleep() here, from whichever thread delivers it (a progress thread). Returns false
  // where no thread sees this backend's events while nobody polls it: the sleeper must
  // then poll it itself. Call once, before connect(); the device keeps the hook until
  // it is destroyed.
  virtual bool setWakeHook(std::function<void()> hook) {
    (void)hook;
    return false;
  }
  // Wake this device's sleepers as a delivery would (what another device's hook calls).
  // Any thread; cheap when nobody sleeps.
  virtual void wakeSleepers() {}
};

// Create the device of a backend by name ("shm"). Throws Error naming the alternatives
// when the backend does not exist or cannot run on this host.
std::unique_ptr<Device> createDevice(const std::string& name, int rank, int size, const Options& options);

// Which backend reaches which peer: the one place that decides it (job.cc).
//
// networkOffer(): the network backends this rank could use to reach other hosts, best
// first, comma-separated ("ibverbs,tcp"): bootstrap exchanges these between ranks (only
// when the job spans hosts: probing an RDMA device costs milliseconds) and hands every
// rank's offer back to createJobDevice.
std::string networkOffer(const Options& options);
// The device of a job. options.transport = RDMACOLL_TRANSPORT: "auto" uses the local
// backend when every rank is on this host, else the local backend to same-host peers and,
// to the others, the first network backend of rank 0's offer that every rank offers
// (hybrid/); a backend's name uses that backend for every peer. hostOf[r] = host index of
// rank r; offers[r] = rank r's networkOffer() (may be empty on one host).
std::unique_ptr<Device> createJobDevice(const Options& options, int rank, const std::vector<int>& hostOf,
                                        const std::vector<std::string>& offers);
// Throws Error quoting `value` unless it is "auto" or a backend's name (RDMACOLL_TRANSPORT).
void checkTransportSetting(const std::string& value);
// The network backends a job with this RDMACOLL_TRANSPORT may run between hosts, best
// first, before any is chosen: every network backend for "auto", none for the local one
// (the slot depth reads their cost models, runtime/setup.cc).
std::vector<std::string> networkCandidates(const std::string& transportSetting);

}  // namespace transport
}  // namespace rdmacoll
