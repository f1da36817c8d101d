// A stand-in for the CUDA runtime (libcudart) on machines without a GPU, for the tests
// only (CMake: RDMACOLL_TESTING, built next to the test hooks as libfake_cudart.so, never
// installed). It exports the functions csrc/device/cuda.cc resolves, with the same C
// signatures; "device memory" is host memory handed out by fakeCudaMalloc, which
// cudaPointerGetAttributes then reports as device memory of device 0; copies run at once
// (memcpy), streams and events are tokens. So a job started with
// RDMACOLL_CUDA_RUNTIME=.../libfake_cudart.so runs every GPU code path of rdmacoll (the
// bindings, the pipeline, the routing, join's chunked stand-ins, the error paths) in real
// processes, without the device's concurrency (tests/test_gpu_staging.py). For the tests:
// fakeCudaMalloc/Free, fakeCudaCopies(kind) counts copies, fakeCudaFailAfter(n) makes the
// copy after the next n fail (cuda error 700).
#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

namespace {

std::mutex mu;
std::map<uintptr_t, size_t> allocations;  // start -> bytes
std::atomic<long> copies[3];              // by kind: 1 host to device, 2 device to host
std::atomic<long> failAfter{-1};          // copies left before one fails (-1: never)

bool isDevice(const void* p) {
  std::lock_guard<std::mutex> g(mu);
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = allocations.upper_bound(a);
  if (it == allocations.begin()) return false;
  --it;
  return a < it->first + it->second;
}

struct Attributes {  // cudaPointerAttributes (CUDA 11-13)
  int type;
  int device;
  void* devicePointer;
  void* hostPointer;
  long reserved[8];
};

}  // namespace

extern "C" {

int cudaGetDeviceCount(int* n) {
  *n = 1;
  return 0;
}
int cudaGetDevice(int* d) {
  *d = 0;
  return 0;
}
int cudaSetDevice(int d) { return d == 0 ? 0 : 101; }  // cudaErrorInvalidDevice
int cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return 0;
}
int cudaDriverGetVersion(int* v) {
  *v = 13000;
  return 0;
}
const char* cudaGetErrorString(int e) { return e == 0 ? "no error" : "fake CUDA error"; }
int cudaGetLastError() { return 0; }
int cudaPointerGetAttributes(void* out, const void* p) {
  Attributes a{};
  if (isDevice(p)) {
    a.type = 2;  // cudaMemoryTypeDevice
    a.device = 0;
    a.devicePointer = const_cast<void*>(p);
  } else {
    a.device = -1;
  }
  std::memcpy(out, &a, sizeof a);
  return 0;
}
int cudaStreamCreateWithFlags(void** s, unsigned) {
  *s = new char;
  return 0;
}
int cudaStreamDestroy(void* s) {
  delete static_cast<char*>(s);
  return 0;
}
int cudaStreamWaitEvent(void*, void*, unsigned) { return 0; }
int cudaStreamSynchronize(void*) { return 0; }
int cudaEventCreateWithFlags(void** e, unsigned) {
  *e = new char;
  return 0;
}
int cudaEventDestroy(void* e) {
  delete static_cast<char*>(e);
  return 0;
}
int cudaEventRecord(void*, void*) { return 0; }
int cudaEventSynchronize(void*) { return 0; }
int cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, void*) {
  if (failAfter.load() == 0) return 700;  // cudaErrorIllegalAddress
  if (failAfter.load() > 0) --failAfter;
  std::memcpy(dst, src, n);
  if (kind == 1 || kind == 2) ++copies[kind];
  return 0;
}
int cudaHostRegister(void*, size_t, unsigned) { return 0; }
int cudaHostUnregister(void*) { return 0; }

// ---- for the tests
void* fakeCudaMalloc(size_t n) {
  void* p = mmap(nullptr, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::lock_guard<std::mutex> g(mu);
  allocations[reinterpret_cast<uintptr_t>(p)] = n ? n : 1;
  return p;
}
void fakeCudaFree(void* p) {
  std::lock_guard<std::mutex> g(mu);
  auto it = allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == allocations.end()) return;
  munmap(p, it->second);
  allocations.erase(it);
}
long fakeCudaCopies(int kind) { return kind == 1 || kind == 2 ? copies[kind].load() : 0; }
void fakeCudaFailAfter(long n) { failAfter = n; }

}  // extern "C"
