// Collectives on device (GPU) memory, staged through page-locked host memory.
//
// Terms: n, the message's bytes; c, the chunk (the cuda_chunk_bytes setting, rounded down to
// a multiple of the element size); k = ceil(n / c) chunks (one of 0 bytes when n is 0); S,
// the slots of c bytes in the staging ring (cuda_staging_bytes / c, at most 256), host memory from the
// communicator's pool (so peers on the host reach it as they reach any pool block),
// page-locked once with cudaHostRegister so that the copies run asynchronously.
//
// Pipeline (runStaged), for chunk j in slot j % S: download j (device -> host, on a copy
// stream ordered after the caller's stream and after the upload that last used the slot),
// wait for it, run the host collective on the slot in place, queue its upload (host ->
// device, on a second copy stream), and queue the download of chunk j + S into the slot
// just uploaded from. So the download of later chunks, the host collective of chunk j and
// the upload of earlier ones overlap; the caller's stream waits for the uploads at the end
// (the result is ready on it) and the CPU waits only for downloads: a message of one chunk
// costs one device synchronisation.
//
// allreduce: n down and n up per rank across PCIe, plus the host algorithm's own traffic.
// broadcast: the root downloads, every rank uploads (the root too when out != in).
// The other collectives (allgather, alltoall, reducescatter) take the whole input down
// (download()), run on the host, and the caller puts the result up (upload()).
#pragma once
#include <cstddef>
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "comm/pool.h"
#include "device/cuda.h"
#include "runtime/group.h"
#include "runtime/request.h"

namespace rdmacoll {

struct StagedChunk {
  size_t offset = 0, bytes = 0;
  int slot = 0;
};
// The chunks of a message of `bytes` (see above), computed, never stored (no allocation per
// call): chunkBytes is rounded down to a multiple of elemSize (at least one element), chunk
// j goes to slot j % slots, and a message of no bytes is one empty chunk (the ranks meet).
struct StagingPlan {
  size_t bytes = 0, chunk = 1;
  int slots = 1;
  size_t count() const { return bytes == 0 ? 1 : (bytes + chunk - 1) / chunk; }
  StagedChunk at(size_t j) const {
    StagedChunk c;
    c.offset = j * chunk;
    c.bytes = std::min(chunk, bytes - c.offset);
    c.slot = static_cast<int>(j % static_cast<size_t>(slots));
    return c;
  }
};
StagingPlan stagingPlan(size_t bytes, size_t elemSize, size_t chunkBytes, int slots);
// The smallest chunk the pipeline uses (cuda_chunk_bytes' lower bound).
constexpr size_t kMinStagingChunk = 4096;

// What the pipeline needs of a device: asynchronous copies per ring slot, and their
// completion. (CUDA's, below; the tests drive the pipeline with a recording fake.)
class DeviceCopies {
 public:
  virtual ~DeviceCopies() = default;
  virtual void begin() = 0;  // copies from here on are ordered after the caller's stream
  // Queued: dev -> host, after the last upload out of `slot`.
  virtual void toHost(int slot, void* host, const void* dev, size_t n) = 0;
  virtual void waitHost(int slot) = 0;  // the slot's download has arrived
  virtual void waitFree(int slot) = 0;  // the slot's last upload has finished
  // Queued: host -> dev.
  virtual void toDevice(int slot, void* dev, const void* host, size_t n) = 0;
  virtual void finish() = 0;  // the caller's stream waits for every copy queued
};

// The pipeline: `devIn` null skips the downloads (a broadcast's receivers), `devOut` null
// the uploads (a broadcast's root in place); collective(slot memory, bytes) runs the host
// collective of one chunk (any callable: nothing is allocated to hold it).
template <typename Collective>
void runStaged(const StagingPlan& plan, DeviceCopies& copies, char* ring, size_t slotBytes, const char* devIn,
               char* devOut, Collective&& collective) {
  const size_t k = plan.count();
  const size_t slots = std::min(k, static_cast<size_t>(plan.slots));  // (the ring's slots used)
  auto slotOf = [&](const StagedChunk& c) { return ring + static_cast<size_t>(c.slot) * slotBytes; };
  auto down = [&](size_t j) {
    const StagedChunk c = plan.at(j);
    if (devIn) copies.toHost(c.slot, slotOf(c), devIn + c.offset, c.bytes);
  };
  copies.begin();
  for (size_t j = 0; j < slots; ++j) down(j);
  for (size_t j = 0; j < k; ++j) {
    const StagedChunk c = plan.at(j);
    if (devIn) {
      copies.waitHost(c.slot);
    } else {
      copies.waitFree(c.slot);
    }
    collective(slotOf(c), c.bytes);
    if (devOut) copies.toDevice(c.slot, devOut + c.offset, slotOf(c), c.bytes);
    if (j + slots < k) down(j + slots);  // (queued after the upload out of its slot)
  }
  copies.finish();
}

// The device holding [p, p + n) (device or managed memory; n 0: the current device);
// ArgumentError naming `what` otherwise.
int deviceHolding(const cuda::Runtime& rt, const void* p, size_t n, const char* what);

struct StagingOptions {
  size_t chunkBytes = size_t(4) << 20;
  size_t ringBytes = size_t(64) << 20;
  std::string runtimeLibrary;  // the cuda_runtime setting ("" searches)
};

// A group's staged collectives: the ring, and the copy streams and events per device.
// Made on a group's first device call; one call at a time (python/device.h serialises
// them). The ring serves every device of the process, one after the other.
class DeviceStaging {
 public:
  DeviceStaging(Group& group, StagingOptions options);
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // r: an allreduce or broadcast whose in and out are device memory of `device` (checked),
  // ordered after `stream`'s work and ready on it when this returns.
  void run(const Request& r, int device, cuda::Stream stream);
  // Whole copies for the collectives that run on the host: download returns once the
  // bytes are in `host`; upload once they left it (the result is ready on `stream`).
  void download(void* host, const void* dev, size_t n, int device, cuda::Stream stream);
  void upload(void* dev, const void* host, size_t n, int device, cuda::Stream stream);
  // Whether the ring is page-locked (false: the runtime refused; copies then wait).
  bool pinned() const { return pinned_; }
  const cuda::Runtime& runtime() const { return rt_; }

  struct PerDevice;

 private:
  PerDevice& on(int device);
  PerDevice& use(int device);  // on(device), after the previous device's copies finished
  void settle(PerDevice& d);   // waits for d's copy streams (errors ignored)
  // download (up false) or upload (true) of n bytes, whole, on the copy stream.
  void copyWhole(void* dst, const void* src, size_t n, int device, cuda::Stream stream, bool up);
  void checkDevicePointer(const void* p, size_t n, int device, const char* what) const;

  Group& group_;
  StagingOptions options_;
  const cuda::Runtime& rt_;
  std::shared_ptr<MemoryPool> pool_;
  MemoryPool::Block* ring_ = nullptr;
  int slots_ = 1;
  bool pinned_ = false;
  std::vector<std::unique_ptr<PerDevice>> devices_;
  PerDevice* last_ = nullptr;               // the device the ring was last used for
  static constexpr size_t kMaxSlots = 256;  // (two events each, per device)
};

}  // namespace rdmacoll
