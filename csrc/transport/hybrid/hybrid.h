// Several hosts: shared memory to the peers on this host, a network transport (tcp or
// ibverbs) to the others, behind one Device, so nothing above transport/ knows.
//
// Memory: allocate() takes the local backend's memory (peers on this host map it) and
// registers the same bytes with the network backend; registerMemory() registers with
// both. pack() writes the local backend's packed form into the first half of
// PackedMemory and the network backend's into the second (each must fit kHalfBytes), and
// every endpoint unpacks the half of its own backend.
//
// Endpoints: connect(peer) asks the local backend when the peer is on this host
// (hostOf[peer] == hostOf[rank]), else the network backend; the endpoint it returns is
// wrapped only to pick its half of packed memory. Capabilities are per endpoint: remote
// peers cannot be read or mapped, so the algorithms that need that are not used.
//
// Sleeping: the two backends ring different doorbells. A sleeper announces itself to
// both, sleeps on the local one, and after each slice asks the network one (without
// waiting) whether something arrived. Where the network backend has a thread that sees
// its events (tcp's progress thread: setWakeHook), each event also rings the local
// doorbell, so a remote peer's message ends the sleep at once. Otherwise (ibverbs: no
// such thread) the sleep is cut into slices of kSliceMs: a wake-up from a remote peer
// costs at most one slice, and only waits long enough to sleep pay it.
#pragma once
#include <memory>
#include <vector>

#include "transport/transport.h"

namespace rdmacoll {
namespace transport {
namespace hybrid {

constexpr size_t kHalfBytes = PackedMemory::kBytes / 2;
constexpr int kSliceMs = 1;

class HybridDevice : public Device {
 public:
  HybridDevice(int rank, std::vector<int> hostOf, std::unique_ptr<Device> local, std::unique_ptr<Device> net);
  ~HybridDevice() override;
  const char* name() const override { return name_.c_str(); }
  std::string localBackend() const override { return local_->name(); }
  std::string networkBackend() const override { return net_->name(); }
  // The local backend's: a sleeper here sees network events only between slices (below),
  // so polling longer is the cheaper way to catch them.
  int pollMicros() const override { return local_->pollMicros(); }
  std::unique_ptr<Memory> allocate(size_t len) override;
  std::unique_ptr<Memory> registerMemory(void* ptr, size_t len) override;
  std::string failure() override;
  std::string listenAddress() const override { return net_->listenAddress(); }
  Bytes address() const override;
  void beginSetup(const Bytes& secret) override;
  std::vector<std::string> endSetup() override;
  std::unique_ptr<Endpoint> connect(int peer, const Bytes& peerAddress) override;
  uint64_t prepareSleep() override;
  void cancelSleep() override;
  void sleep(uint64_t seen, int timeoutMs) override;

 private:
  int rank_;
  std::vector<int> hostOf_;
  std::unique_ptr<Device> local_, net_;
  std::string name_;
  uint64_t netSeen_ = 0;
  bool netWakes_ = false;  // the network backend rings the local doorbell (setWakeHook)
};

}  // namespace hybrid
}  // namespace transport
}  // namespace rdmacoll
