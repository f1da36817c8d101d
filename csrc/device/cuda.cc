#include "device/cuda.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "common/error.h"

namespace rdmacoll {
namespace cuda {

namespace {

// The sonames of the runtimes this library was written against (the symbols it uses
// exist unchanged in each), newest first.
const char* const kSonames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"};

template <typename F>
bool resolve(void* lib, const char* symbol, F* out, std::string* missing) {
  void* p = dlsym(lib, symbol);
  if (!p) {
    *missing = symbol;
    return false;
  }
  *out = reinterpret_cast<F>(p);
  return true;
}

std::unique_ptr<Runtime> bind(void* lib, const std::string& file, std::string* why) {
  auto rt = std::make_unique<Runtime>();
  rt->library = file;
  std::string missing;
  const bool ok = resolve(lib, "cudaGetDeviceCount", &rt->getDeviceCount, &missing) &&
                  resolve(lib, "cudaGetDevice", &rt->getDevice, &missing) &&
                  resolve(lib, "cudaSetDevice", &rt->setDevice, &missing) &&
                  resolve(lib, "cudaRuntimeGetVersion", &rt->runtimeGetVersion, &missing) &&
                  resolve(lib, "cudaDriverGetVersion", &rt->driverGetVersion, &missing) &&
                  resolve(lib, "cudaGetErrorString", &rt->getErrorString, &missing) &&
                  resolve(lib, "cudaGetLastError", &rt->getLastError, &missing) &&
                  resolve(lib, "cudaPointerGetAttributes", &rt->pointerGetAttributes, &missing) &&
                  resolve(lib, "cudaStreamCreateWithFlags", &rt->streamCreateWithFlags, &missing) &&
                  resolve(lib, "cudaStreamDestroy", &rt->streamDestroy, &missing) &&
                  resolve(lib, "cudaStreamWaitEvent", &rt->streamWaitEvent, &missing) &&
                  resolve(lib, "cudaStreamSynchronize", &rt->streamSynchronize, &missing) &&
                  resolve(lib, "cudaEventCreateWithFlags", &rt->eventCreateWithFlags, &missing) &&
                  resolve(lib, "cudaEventDestroy", &rt->eventDestroy, &missing) &&
                  resolve(lib, "cudaEventRecord", &rt->eventRecord, &missing) &&
                  resolve(lib, "cudaEventSynchronize", &rt->eventSynchronize, &missing) &&
                  resolve(lib, "cudaMemcpyAsync", &rt->memcpyAsync, &missing) &&
                  resolve(lib, "cudaHostRegister", &rt->hostRegister, &missing) &&
                  resolve(lib, "cudaHostUnregister", &rt->hostUnregister, &missing);
  if (!ok) {
    *why = file + " has no " + missing;
    return nullptr;
  }
  return rt;
}

std::unique_ptr<Runtime> load(const std::string& library, std::string* why) {
  std::vector<std::string> tried;
  auto attempt = [&](const std::string& name, int flags) -> std::unique_ptr<Runtime> {
    void* lib = dlopen(name.c_str(), flags);
    if (!lib) {
      if (!(flags & RTLD_NOLOAD)) {
        const char* e = dlerror();
        tried.push_back(e ? e : name + ": not found");
      }
      return nullptr;
    }
    std::string bad;
    auto rt = bind(lib, name, &bad);
    if (!rt) {
      tried.push_back(bad);
      dlclose(lib);
    }
    return rt;
  };
  std::unique_ptr<Runtime> rt;
  if (!library.empty()) {
    rt = attempt(library, RTLD_NOW | RTLD_LOCAL);
  } else {
    for (const char* n : kSonames)  // one a framework loaded: the same runtime as its tensors'
      if (!rt) rt = attempt(n, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    for (const char* n : kSonames)
      if (!rt) rt = attempt(n, RTLD_NOW | RTLD_LOCAL);
    if (!rt) rt = attempt("/usr/local/cuda/lib64/libcudart.so", RTLD_NOW | RTLD_LOCAL);
  }
  if (!rt) {
    std::string all;
    for (const auto& t : tried) all += (all.empty() ? "" : "; ") + t;
    *why = "no CUDA runtime could be loaded (" + all +
           "); install one (pip install nvidia-cuda-runtime, or import torch/cupy first) or name "
           "it with RDMACOLL_CUDA_RUNTIME";
  }
  return rt;
}

struct Loaded {
  std::mutex mu;
  bool tried = false;
  std::string library;  // what the first call asked for ("": searched)
  std::unique_ptr<Runtime> rt;
  std::string why;
};

Loaded& loaded() {
  static Loaded* l = new Loaded;  // (never destroyed: tensors may be freed at exit)
  return *l;
}

}  // namespace

void Runtime::check(int rc, const char* what) const {
  if (rc == 0) return;
  getLastError();  // (clears the sticky-free error so that later calls start clean)
  const char* words = getErrorString(rc);
  throw Error(std::string(what) + ": " + (words ? words : "unknown error") + " (cuda error " + std::to_string(rc) +
              ")");
}

MemoryType Runtime::where(const void* ptr, int* device) const {
  // cudaPointerAttributes: {int type; int device; void* devicePointer; void* hostPointer;
  // long reserved[8]} in CUDA 11-13; room for more in case a later one grows it.
  alignas(8) unsigned char attrs[256] = {};
  *device = -1;
  if (pointerGetAttributes(attrs, ptr) != 0) {
    getLastError();
    return MemoryType::kUnregistered;
  }
  int type = 0;
  std::memcpy(&type, attrs, sizeof type);
  std::memcpy(device, attrs + sizeof(int), sizeof(int));
  return static_cast<MemoryType>(type);
}

const Runtime* tryRuntime(const std::string& library, std::string* why) {
  Loaded& l = loaded();
  std::lock_guard<std::mutex> g(l.mu);
  if (!l.tried) {
    l.tried = true;
    l.library = library;
    l.rt = load(library, &l.why);
  }
  if (!l.rt && !library.empty() && library != l.library) {  // (nothing loaded yet: try the one named)
    l.library = library;
    l.rt = load(library, &l.why);
  }
  if (!library.empty() && library != l.library &&
      !(l.rt && library == l.rt->library)) {  // (one runtime per process: the first kept)
    if (why)
      *why = "RDMACOLL_CUDA_RUNTIME=" + library + " comes too late: this process already loaded " +
             (l.rt ? l.rt->library : std::string("no CUDA runtime")) + " (" +
             (l.library.empty() ? std::string("searched") : "named " + l.library) +
             "); set it before the first GPU call";
    return nullptr;
  }
  if (!l.rt && why) *why = l.why;
  return l.rt.get();
}

const Runtime& runtime(const std::string& library) {
  std::string why;
  const Runtime* rt = tryRuntime(library, &why);
  if (!rt) throw Error(why);
  return *rt;
}

DeviceScope::DeviceScope(const Runtime& rt, int device) : rt_(rt) {
  rt_.check(rt_.getDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) {
    rt_.check(rt_.setDevice(device), "cudaSetDevice");
  } else {
    previous_ = -1;  // nothing to restore
  }
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0) rt_.setDevice(previous_);
}

}  // namespace cuda
}  // namespace rdmacoll
