// Network transport over TCP: the one-sided contract on one ordered byte stream per peer.
//
// A write is a frame {region, offset, length, immediate} + payload (frame.h). The
// receiving device's progress thread (one per device, epoll over the connections plus
// an eventfd for shutdown) reads each payload straight into the registered target
// region, then queues the immediate: the stream's order gives the contract's ordering
// guarantee. put64 is a header-only frame whose value the receiver stores atomically.
// Senders send from the calling thread (non-blocking socket, poll while the kernel's
// buffer is full), one frame at a time per endpoint (a mutex: put64 may come from any
// thread). Callers waiting for an immediate read their connection themselves when the
// progress thread is not at it, and a caller in sleep() polls the connections and reads
// them too: under load, a hand-off to another thread costs a scheduling delay per message.
// Every event bumps the device doorbell and wakes threads
// sleeping in sleep().
//
// Connections: every device listens on its interface (socket.h) from construction until
// setup ends (endSetup closes the listener); address() = {rank, size, IP version, IPv4 or
// IPv6 address, port, nonce}. For each pair the lower rank connects; both sides prove the
// job's secret before anything else is read (handshake.h), and the higher rank serves all
// incoming handshakes at once (connections of peers other than the one awaited are kept
// until their turn).
//
// Capabilities: none (no read, no map); registration is an id in a table, so user
// memory is registered like allocated memory, but not per call (cheapRegistration false).
#pragma once
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "transport/tcp/frame.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/interfaces.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace rdmacoll {
namespace transport {
namespace tcp {

// Registered regions by id, shared by the device, its parsers and its Memory objects
// (pool memory may outlive the device).
class Regions : public RegionLookup {
 public:
  uint32_t add(char* base, size_t len, std::shared_ptr<void> keep);
  void remove(uint32_t id);
  bool find(uint32_t id, RegionRef* out) override;

 private:
  std::mutex mu_;
  uint32_t next_ = 1;
  std::unordered_map<uint32_t, RegionRef> map_;
};

class TcpMemory : public Memory {
 public:
  TcpMemory(std::shared_ptr<Regions> regions, int rank, char* ptr, size_t len, std::shared_ptr<void> keep,
            bool allocated);
  ~TcpMemory() override;
  void pack(PackedMemory* out) const override;
  // Registered memory is an id in a table: nothing to give back, and nothing pinned.
  bool discardable() const override { return true; }
  void discard(size_t off, size_t len) override;  // allocated: MADV_DONTNEED

 private:
  std::shared_ptr<Regions> regions_;
  int rank_;
  uint32_t id_;
  bool allocated_;
};

class TcpDevice;

class TcpEndpoint : public Endpoint {
 public:
  TcpEndpoint(TcpDevice* dev, int peer, int fd, const std::string& where);
  ~TcpEndpoint() override;
  uint32_t capabilities() const override { return 0; }
  void unpack(const PackedMemory& packed, RemoteMemory* out) override;
  uint64_t write(const void* src, const RemoteMemory& dst, size_t dstOff, size_t len, bool hasImm,
                 uint32_t imm) override;
  void put64(const RemoteMemory& dst, size_t dstOff, uint64_t value) override;
  bool pollImmediate(uint32_t* imm) override;
  bool alive() override { return !dead_.load(std::memory_order_acquire); }
  std::string describe() const override;

  // Read what the socket holds into memory (the receive lock: the progress thread waits
  // for it, a caller only tries it). Returns true when something happened that sleepers
  // must see.
  bool drain(bool wait);
  int fd() const { return fd_; }

 private:
  bool readLocked();
  void checkLeft(const RemoteMemory& dst) const;
  void sendFrame(const FrameHeader& h, const void* payload, size_t len);
  void markDead(const std::string& why);
  std::string deathText() const;
  void checkBounds(const RemoteMemory& m, size_t off, size_t len, const char* what) const;

  TcpDevice* dev_;
  int peer_;
  int fd_;
  std::string where_;  // peer's ip:port
  std::mutex rxMu_;    // the parser and the reading side of the socket
  FrameParser parser_;
  std::mutex sendMu_;
  std::atomic<bool> dead_{false};
  std::atomic<bool> left_{false};  // the peer said goodbye: writes to it are dropped
  bool removed_ = false;           // taken out of the epoll set (under rxMu_)
  mutable std::mutex errMu_;
  std::string error_;
  std::mutex immMu_;
  std::deque<uint32_t> imms_;
  std::atomic<uint64_t> immAvail_{0};
};

class TcpDevice : public Device {
 public:
  TcpDevice(int rank, int size, const Options& options);
  ~TcpDevice() override;
  const char* name() const override { return "tcp"; }
  int pollMicros() const override { return 100; }
  std::unique_ptr<Memory> allocate(size_t len) override;
  std::unique_ptr<Memory> registerMemory(void* ptr, size_t len) override;
  Bytes address() const override;
  void beginSetup(const Bytes& secret) override;
  std::vector<std::string> endSetup() override;
  std::unique_ptr<Endpoint> connect(int peer, const Bytes& peerAddress) override;
  uint64_t prepareSleep() override;
  void cancelSleep() override;
  void sleep(uint64_t seen, int timeoutMs) override;
  bool setWakeHook(std::function<void()> hook) override;  // the progress thread calls it
  std::string listenAddress() const override;             // "eth0 10.0.0.2:41321"

  int rank() const { return rank_; }
  // True in a child of fork(): its copy owns nothing (fork_guard.h).
  bool forked() const { return getpid() != pid_; }
  Regions* regions() const { return regions_.get(); }
  // Wake sleepers (an event landed, or a connection died).
  void ring();
  void attach(TcpEndpoint* ep);
  void detach(TcpEndpoint* ep);
  void unwatch(int fd);

 private:
  void progressLoop();
  int acceptFrom(int peer, uint64_t peerNonce);
  int connectToPeer(int peer, const IpAddress& ip, uint16_t port, uint64_t peerNonce);

  int rank_, size_;
  pid_t pid_;
  IpAddress ip_;
  uint16_t port_ = 0;
  std::string ifname_;
  uint64_t nonce_;
  int listenFd_ = -1;
  int epollFd_ = -1;
  int eventFd_ = -1;
  std::shared_ptr<Regions> regions_;
  std::unique_ptr<Acceptor> acceptor_;  // between beginSetup and endSetup

  // Held by the progress thread while it reads; a sleeping caller only tries it.
  std::mutex connsMu_;
  std::unordered_map<int, TcpEndpoint*> conns_;  // by fd
  std::atomic<bool> stop_{false};
  std::thread progress_;

  // Sleeping (prepareSleep/sleep): the doorbell counts events; ring() signals sleepFd_
  // when a thread sleeps, which waits in poll() on it and on the connections (and reads
  // them itself: no hand-off to the progress thread on the way to a waiting caller).
  std::atomic<uint32_t> doorbell_{0};
  std::atomic<uint32_t> sleepers_{0};
  int sleepFd_ = -1;
  // Another device's wake-up (setWakeHook), called by ring(); published once.
  std::unique_ptr<std::function<void()>> hookOwner_;
  std::atomic<std::function<void()>*> hook_{nullptr};
};

// For `rdmacoll doctor` (probe.cc): the interface and address a device would listen on and
// why (RDMACOLL_SOCKET_IFNAME's rules, interfaces.h), and every interface here.
TransportReport probe(const Options& options);

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
