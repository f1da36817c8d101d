#include "transport/hybrid/hybrid.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace rdmacoll {
namespace transport {
namespace hybrid {

namespace {

class HybridMemory : public Memory {
 public:
  HybridMemory(std::unique_ptr<Memory> local, std::unique_ptr<Memory> net)
      : Memory(local->data(), local->size()), local_(std::move(local)), net_(std::move(net)) {}
  // The network registration goes first: it refers to the local backend's bytes.
  ~HybridMemory() override { net_.reset(); }
  // Both must allow it: the network backend's registration may have pinned the pages.
  bool discardable() const override { return local_->discardable() && net_->discardable(); }
  void discard(size_t off, size_t len) override { local_->discard(off, len); }
  void pack(PackedMemory* out) const override {
    PackedMemory a, b;
    std::memset(a.bytes, 0, sizeof(a.bytes));
    std::memset(b.bytes, 0, sizeof(b.bytes));
    local_->pack(&a);
    net_->pack(&b);
    for (size_t i = kHalfBytes; i < PackedMemory::kBytes; ++i) {
      if (a.bytes[i] != 0 || b.bytes[i] != 0) throw Error("hybrid: a backend packs memory into more than 32 bytes");
    }
    std::memcpy(out->bytes, a.bytes, kHalfBytes);
    std::memcpy(out->bytes + kHalfBytes, b.bytes, kHalfBytes);
  }

 private:
  std::unique_ptr<Memory> local_, net_;
};

// A backend's endpoint that reads its half of packed memory.
class HalfEndpoint : public Endpoint {
 public:
  HalfEndpoint(std::unique_ptr<Endpoint> inner, size_t half) : inner_(std::move(inner)), half_(half) {}
  uint32_t capabilities() const override { return inner_->capabilities(); }
  void unpack(const PackedMemory& packed, RemoteMemory* out) override {
    PackedMemory mine{};
    std::memcpy(mine.bytes, packed.bytes + half_ * kHalfBytes, kHalfBytes);
    inner_->unpack(mine, out);
  }
  uint64_t write(const void* src, const RemoteMemory& dst, size_t dstOff, size_t len, bool hasImm,
                 uint32_t imm) override {
    return inner_->write(src, dst, dstOff, len, hasImm, imm);
  }
  void waitWritten(uint64_t ticket) override { inner_->waitWritten(ticket); }
  void put64(const RemoteMemory& dst, size_t dstOff, uint64_t value) override { inner_->put64(dst, dstOff, value); }
  bool pollImmediate(uint32_t* imm) override { return inner_->pollImmediate(imm); }
  void read(const RemoteMemory& src, size_t srcOff, void* dst, size_t len) override {
    inner_->read(src, srcOff, dst, len);
  }
  void* map(RemoteMemory* mem) override { return inner_->map(mem); }
  bool alive() override { return inner_->alive(); }
  std::string describe() const override { return inner_->describe(); }

 private:
  std::unique_ptr<Endpoint> inner_;
  size_t half_;
};

}  // namespace

HybridDevice::HybridDevice(int rank, std::vector<int> hostOf, std::unique_ptr<Device> local,
                           std::unique_ptr<Device> net)
    : rank_(rank),
      hostOf_(std::move(hostOf)),
      local_(std::move(local)),
      net_(std::move(net)),
      name_(std::string(local_->name()) + "+" + net_->name()) {
  Device* localDevice = local_.get();  // outlives net_ (members are destroyed in reverse)
  netWakes_ = net_->setWakeHook([localDevice] { localDevice->wakeSleepers(); });
}

HybridDevice::~HybridDevice() = default;

std::unique_ptr<Memory> HybridDevice::allocate(size_t len) {
  std::unique_ptr<Memory> local = local_->allocate(len);
  std::unique_ptr<Memory> net = net_->registerMemory(local->data(), local->size());
  return std::make_unique<HybridMemory>(std::move(local), std::move(net));
}

std::unique_ptr<Memory> HybridDevice::registerMemory(void* ptr, size_t len) {
  std::unique_ptr<Memory> local = local_->registerMemory(ptr, len);
  std::unique_ptr<Memory> net = net_->registerMemory(ptr, len);
  return std::make_unique<HybridMemory>(std::move(local), std::move(net));
}

// Address: [u32 length of the local backend's address][local address][network address].
Bytes HybridDevice::address() const {
  const Bytes a = local_->address(), b = net_->address();
  Bytes out(4 + a.size() + b.size());
  const uint32_t n = static_cast<uint32_t>(a.size());
  std::memcpy(out.data(), &n, 4);
  std::copy(a.begin(), a.end(), out.begin() + 4);
  std::copy(b.begin(), b.end(), out.begin() + 4 + a.size());
  return out;
}

void HybridDevice::beginSetup(const Bytes& secret) {
  local_->beginSetup(secret);
  net_->beginSetup(secret);
}

std::vector<std::string> HybridDevice::endSetup() {
  std::vector<std::string> a = local_->endSetup(), b = net_->endSetup();
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::unique_ptr<Endpoint> HybridDevice::connect(int peer, const Bytes& peerAddress) {
  RC_CHECK(peer >= 0 && peer < static_cast<int>(hostOf_.size()),
           "hybrid: no host known for rank " + std::to_string(peer));
  uint32_t localLen = 0;
  RC_CHECK(peerAddress.size() >= 4, "malformed address from rank " + std::to_string(peer));
  std::memcpy(&localLen, peerAddress.data(), 4);
  RC_CHECK(localLen <= peerAddress.size() - 4, "malformed address from rank " + std::to_string(peer));
  const auto split = peerAddress.begin() + 4 + localLen;
  if (hostOf_[peer] == hostOf_[rank_]) {
    return std::make_unique<HalfEndpoint>(local_->connect(peer, Bytes(peerAddress.begin() + 4, split)), 0);
  }
  return std::make_unique<HalfEndpoint>(net_->connect(peer, Bytes(split, peerAddress.end())), 1);
}

std::string HybridDevice::failure() {
  std::string why = local_->failure();
  return why.empty() ? net_->failure() : why;
}

uint64_t HybridDevice::prepareSleep() {
  const uint64_t seen = local_->prepareSleep();  // first: from here on the hook rings it
  netSeen_ = net_->prepareSleep();
  return seen;
}

void HybridDevice::cancelSleep() {
  local_->cancelSleep();
  net_->cancelSleep();
}

void HybridDevice::sleep(uint64_t seen, int timeoutMs) {
  // With the hook, a network event rings the local doorbell and ends this sleep at once;
  // without it, the slice bounds how late a network event is seen.
  local_->sleep(seen, netWakes_ ? timeoutMs : std::min(timeoutMs, kSliceMs));
  net_->sleep(netSeen_, 0);  // consumes the announcement; returns at once
}

}  // namespace hybrid
}  // namespace transport
}  // namespace rdmacoll
