// The CUDA runtime, loaded at run time (dlopen), never linked and never compiled against:
// the package imports and runs where there is none, and nvcc on the build machine changes
// nothing. A leaf library beside reduce/ and transport/ (common/ only): the staged
// collectives (runtime/staging.h) use it to copy between device memory and page-locked
// host memory.
//
// Which library: the `cuda_runtime` setting when set (a path or a file name), else one a
// framework already loaded (torch, CuPy: libcudart.so.13, .12, .11.0), else the first of
// those names the dynamic loader finds, else /usr/local/cuda/lib64/libcudart.so (the core
// reads no environment: a runtime elsewhere is named by the setting).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace rdmacoll {
namespace cuda {

using Stream = void*;  // cudaStream_t (0: the legacy default stream)
using Event = void*;   // cudaEvent_t

// The runtime's values this library uses (cuda_runtime_api.h, stable since CUDA 4).
constexpr int kMemcpyHostToDevice = 1;
constexpr int kMemcpyDeviceToHost = 2;
constexpr unsigned kStreamNonBlocking = 1;
constexpr unsigned kEventDisableTiming = 2;
constexpr unsigned kHostRegisterPortable = 1;
enum class MemoryType : int { kUnregistered = 0, kHost = 1, kDevice = 2, kManaged = 3 };

struct Runtime {
  std::string library;  // the file it came from
  int (*getDeviceCount)(int*);
  int (*getDevice)(int*);
  int (*setDevice)(int);
  int (*runtimeGetVersion)(int*);
  int (*driverGetVersion)(int*);
  const char* (*getErrorString)(int);
  int (*getLastError)();
  int (*pointerGetAttributes)(void* attributes, const void* ptr);
  int (*streamCreateWithFlags)(Stream*, unsigned);
  int (*streamDestroy)(Stream);
  int (*streamWaitEvent)(Stream, Event, unsigned);
  int (*streamSynchronize)(Stream);
  int (*eventCreateWithFlags)(Event*, unsigned);
  int (*eventDestroy)(Event);
  int (*eventRecord)(Event, Stream);
  int (*eventSynchronize)(Event);
  int (*memcpyAsync)(void*, const void*, size_t, int, Stream);
  int (*hostRegister)(void*, size_t, unsigned);
  int (*hostUnregister)(void*);

  // Throws Error "<what>: <the runtime's words> (cuda error N)" unless rc is 0.
  void check(int rc, const char* what) const;
  // Where ptr lives: its memory type and device (a pointer the runtime does not know is
  // kUnregistered, device -1).
  MemoryType where(const void* ptr, int* device) const;
};

// The process's runtime, loaded on first use with `library` (see above; "" searches) and
// kept; throws Error saying what was tried when none loads, or when a later call names
// another library than the first one did (one runtime per process). Thread-safe.
const Runtime& runtime(const std::string& library = "");
// The same without throwing: null, and *why set, when none loads (doctor).
const Runtime* tryRuntime(const std::string& library, std::string* why);

// Switches the calling thread to `device` and back when it goes out of scope.
class DeviceScope {
 public:
  DeviceScope(const Runtime& rt, int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  const Runtime& rt_;
  int previous_ = -1;
};

}  // namespace cuda
}  // namespace rdmacoll
