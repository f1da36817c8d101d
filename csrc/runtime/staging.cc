#include "runtime/staging.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"

namespace rdmacoll {

StagingPlan stagingPlan(size_t bytes, size_t elemSize, size_t chunkBytes, int slots) {
  if (elemSize == 0 || slots < 1) throw Error("stagingPlan: element size and slots must be positive");
  StagingPlan p;
  p.bytes = bytes;
  p.chunk = std::max(elemSize, chunkBytes / elemSize * elemSize);
  p.slots = slots;
  return p;
}

int deviceHolding(const cuda::Runtime& rt, const void* p, size_t n, const char* what) {
  int device = -1;
  const cuda::MemoryType t = rt.where(p, &device);
  if (n == 0) {
    if (device < 0) rt.check(rt.getDevice(&device), "cudaGetDevice");
    return device;
  }
  if (t != cuda::MemoryType::kDevice && t != cuda::MemoryType::kManaged)
    throw ArgumentError(std::string(what) + " is not CUDA device memory (the CUDA runtime does not know its address)");
  return device;
}

// ---- CUDA's copies

struct DeviceStaging::PerDevice {
  int device = -1;
  cuda::Stream down = nullptr, up = nullptr;
  cuda::Event start = nullptr, downEnd = nullptr, upEnd = nullptr;
  std::vector<cuda::Event> downDone, upDone;
};

namespace {

class CudaCopies : public DeviceCopies {
 public:
  CudaCopies(const cuda::Runtime& rt, DeviceStaging::PerDevice& d, cuda::Stream caller)
      : rt_(rt), d_(d), caller_(caller) {}
  void begin() override {
    rt_.check(rt_.eventRecord(d_.start, caller_), "cudaEventRecord (the caller's stream)");
    rt_.check(rt_.streamWaitEvent(d_.down, d_.start, 0), "cudaStreamWaitEvent");
    rt_.check(rt_.streamWaitEvent(d_.up, d_.start, 0), "cudaStreamWaitEvent");
  }
  void toHost(int slot, void* host, const void* dev, size_t n) override {
    rt_.check(rt_.streamWaitEvent(d_.down, d_.upDone[slot], 0), "cudaStreamWaitEvent");
    if (n > 0)
      rt_.check(rt_.memcpyAsync(host, dev, n, cuda::kMemcpyDeviceToHost, d_.down), "cudaMemcpyAsync (device to host)");
    rt_.check(rt_.eventRecord(d_.downDone[slot], d_.down), "cudaEventRecord");
  }
  void waitHost(int slot) override { rt_.check(rt_.eventSynchronize(d_.downDone[slot]), "cudaEventSynchronize"); }
  void waitFree(int slot) override { rt_.check(rt_.eventSynchronize(d_.upDone[slot]), "cudaEventSynchronize"); }
  void toDevice(int slot, void* dev, const void* host, size_t n) override {
    if (n > 0)
      rt_.check(rt_.memcpyAsync(dev, host, n, cuda::kMemcpyHostToDevice, d_.up), "cudaMemcpyAsync (host to device)");
    rt_.check(rt_.eventRecord(d_.upDone[slot], d_.up), "cudaEventRecord");
  }
  void finish() override {
    // The caller's stream waits for both: the uploads wrote its output, the downloads read
    // its input (which it may overwrite next).
    rt_.check(rt_.eventRecord(d_.upEnd, d_.up), "cudaEventRecord");
    rt_.check(rt_.eventRecord(d_.downEnd, d_.down), "cudaEventRecord");
    rt_.check(rt_.streamWaitEvent(caller_, d_.upEnd, 0), "cudaStreamWaitEvent (the caller's stream)");
    rt_.check(rt_.streamWaitEvent(caller_, d_.downEnd, 0), "cudaStreamWaitEvent (the caller's stream)");
  }

 private:
  const cuda::Runtime& rt_;
  DeviceStaging::PerDevice& d_;
  cuda::Stream caller_;
};

}  // namespace

DeviceStaging::DeviceStaging(Group& group, StagingOptions options)
    : group_(group), options_(std::move(options)), rt_(cuda::runtime(options_.runtimeLibrary)) {
  options_.chunkBytes = std::max(options_.chunkBytes, kMinStagingChunk);
  slots_ = static_cast<int>(std::clamp<size_t>(options_.ringBytes / options_.chunkBytes, 1, kMaxSlots));
  pool_ = group_.comm().pool();
  ring_ = pool_->acquire(static_cast<size_t>(slots_) * options_.chunkBytes);
  pinned_ = rt_.hostRegister(ring_->data, static_cast<size_t>(slots_) * options_.chunkBytes,
                             cuda::kHostRegisterPortable) == 0;
  if (!pinned_) rt_.getLastError();
}

DeviceStaging::~DeviceStaging() {
  // Nothing of ours may still be copying: every call waited for its downloads, and uploads
  // out of the ring are waited for here (errors ignored: the runtime may be unloading).
  for (auto& d : devices_) {
    rt_.streamSynchronize(d->up);
    rt_.streamSynchronize(d->down);
    for (auto e : d->downDone) rt_.eventDestroy(e);
    for (auto e : d->upDone) rt_.eventDestroy(e);
    for (auto e : {d->start, d->downEnd, d->upEnd}) rt_.eventDestroy(e);
    rt_.streamDestroy(d->up);
    rt_.streamDestroy(d->down);
  }
  if (pinned_) rt_.hostUnregister(ring_->data);
  rt_.getLastError();
  pool_->release(ring_);
}

DeviceStaging::PerDevice& DeviceStaging::on(int device) {
  for (auto& d : devices_)
    if (d->device == device) return *d;
  auto d = std::make_unique<PerDevice>();
  d->device = device;
  cuda::DeviceScope scope(rt_, device);
  rt_.check(rt_.streamCreateWithFlags(&d->down, cuda::kStreamNonBlocking), "cudaStreamCreateWithFlags");
  rt_.check(rt_.streamCreateWithFlags(&d->up, cuda::kStreamNonBlocking), "cudaStreamCreateWithFlags");
  auto event = [&] {
    cuda::Event e = nullptr;
    rt_.check(rt_.eventCreateWithFlags(&e, cuda::kEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  };
  d->start = event();
  d->downEnd = event();
  d->upEnd = event();
  for (int s = 0; s < slots_; ++s) {
    d->downDone.push_back(event());
    d->upDone.push_back(event());
  }
  devices_.push_back(std::move(d));
  return *devices_.back();
}

void DeviceStaging::checkDevicePointer(const void* p, size_t n, int device, const char* what) const {
  if (n == 0) return;
  const int dev = deviceHolding(rt_, p, n, what);
  if (dev != device) {
    throw ArgumentError(std::string(what) + " is on cuda:" + std::to_string(dev) +
                        ", the input on cuda:" + std::to_string(device));
  }
}

void DeviceStaging::run(const Request& r, int device, cuda::Stream stream) {
  if (r.collective != Collective::kAllreduce && r.collective != Collective::kBroadcast) {
    throw Error(std::string("staged ") + collectiveName(r.collective) + " is not pipelined; stage it whole");
  }
  const size_t elem = dtypeSize(r.dtype), n = r.count * elem;
  const bool root = r.collective == Collective::kBroadcast && r.root == group_.comm().rank();
  const bool isBroadcast = r.collective == Collective::kBroadcast;
  checkDevicePointer(r.in, n, device, "the input");
  checkDevicePointer(r.out, n, device, "out");
  validate(r, group_.comm().size());  // (before anything is queued: a bad root, op or dtype)
  const char* in = static_cast<const char*>(r.in);
  char* out = static_cast<char*>(r.out);
  // A broadcast's receivers download nothing; its root uploads only when out is elsewhere.
  const char* devIn = (!isBroadcast || root) ? in : nullptr;
  char* devOut = (isBroadcast && root && out == in) ? nullptr : out;
  cuda::DeviceScope scope(rt_, device);
  PerDevice& d = use(device);
  CudaCopies copies(rt_, d, stream);
  const auto plan = stagingPlan(n, elem, options_.chunkBytes, slots_);
  try {
    runStaged(plan, copies, ring_->data, options_.chunkBytes, devIn, devOut, [&](char* slot, size_t bytes) {
      Request c = r;
      c.in = slot;
      c.out = slot;
      c.count = bytes / elem;
      group_.run(c);
    });
  } catch (const Interrupted&) {
    settle(d);
    throw;
  } catch (...) {
    // Nothing of this call may still write the caller's memory once it has raised, and
    // the peers, waiting in the next chunk's collective, are aborted (a chunk's own
    // failure already did that); the error itself goes on as it was (MemoryError stays).
    settle(d);
    std::string what = "the GPU staging failed";
    try {
      throw;
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    try {
      group_.comm().fail(what);
    } catch (...) {
    }
    throw;
  }
}

void DeviceStaging::settle(PerDevice& d) {
  rt_.streamSynchronize(d.down);
  rt_.streamSynchronize(d.up);
  rt_.getLastError();
}

DeviceStaging::PerDevice& DeviceStaging::use(int device) {
  // The ring is shared by the devices: before another device's copies use it, the last
  // one's have finished (its events guard the slots only for its own streams).
  if (last_ && last_->device != device) settle(*last_);
  last_ = &on(device);
  return *last_;
}

void DeviceStaging::download(void* host, const void* dev, size_t n, int device, cuda::Stream stream) {
  copyWhole(host, dev, n, device, stream, false);
}

void DeviceStaging::upload(void* dev, const void* host, size_t n, int device, cuda::Stream stream) {
  copyWhole(dev, host, n, device, stream, true);
}

void DeviceStaging::copyWhole(void* dst, const void* src, size_t n, int device, cuda::Stream stream, bool up) {
  if (n == 0) return;
  checkDevicePointer(up ? dst : src, n, device, up ? "the output" : "the input");
  cuda::DeviceScope scope(rt_, device);
  PerDevice& d = use(device);
  cuda::Stream copy = up ? d.up : d.down;
  rt_.check(rt_.eventRecord(d.start, stream), "cudaEventRecord (the caller's stream)");
  rt_.check(rt_.streamWaitEvent(copy, d.start, 0), "cudaStreamWaitEvent");
  rt_.check(rt_.memcpyAsync(dst, src, n, up ? cuda::kMemcpyHostToDevice : cuda::kMemcpyDeviceToHost, copy),
            up ? "cudaMemcpyAsync (host to device)" : "cudaMemcpyAsync (device to host)");
  if (up) {  // the caller's stream sees the result
    rt_.check(rt_.eventRecord(d.upEnd, copy), "cudaEventRecord");
    rt_.check(rt_.streamWaitEvent(stream, d.upEnd, 0), "cudaStreamWaitEvent (the caller's stream)");
  }
  rt_.check(rt_.streamSynchronize(copy), "cudaStreamSynchronize");  // (the host memory may go after)
}

}  // namespace rdmacoll
