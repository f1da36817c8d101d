// _core.DeviceCollectives: a communicator's collectives on CUDA memory (runtime/staging.h),
// reached as Communicator.device. Pointers and streams travel as integers (what
// __cuda_array_interface__, torch and CuPy give); device -1 means the one the memory is
// on (the CUDA runtime says). rdmacoll/_device.py is its one caller. Calls run one at a
// time (a mutex taken with the interpreter released: the pipeline shares one ring), and
// after close() (the communicator's) every call raises "shut down".
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "runtime/group.h"
#include "runtime/staging.h"

namespace rdmacoll {
namespace py = pybind11;

class PyDevice {
 public:
  PyDevice(Group& group, StagingOptions options)
      : group_(group), pool_(group.comm().pool()), options_(std::move(options)) {}

  // Ordered after `stream`'s work, the result ready on it when they return.
  void allreduce(uintptr_t in, uintptr_t out, size_t count, int dtype, py::handle op, int device, uintptr_t stream,
                 py::handle name, py::handle shape);
  void broadcast(uintptr_t in, uintptr_t out, size_t count, int dtype, int root, int device, uintptr_t stream,
                 py::handle name, py::handle shape);
  // The bytes of [ptr, ptr + nbytes) in a uint8 array from the pool (the collectives that
  // run on the host); a host array's bytes put up into device memory.
  py::array download(uintptr_t ptr, size_t nbytes, int device, uintptr_t stream);
  void upload(py::handle host, uintptr_t ptr, int device, uintptr_t stream);
  // The device holding [ptr, ptr + nbytes); ArgumentError when it is not device memory.
  int deviceOf(uintptr_t ptr, size_t nbytes);
  bool pinned();
  // The communicator closes: the staging goes (after a call in progress), calls raise.
  void close();

 private:
  DeviceStaging& staging();  // under mu_; raises once closed
  void run(Request& r, uintptr_t in, uintptr_t out, size_t count, int dtype, int device, uintptr_t stream,
           py::handle name, py::handle shape);

  Group& group_;                      // (gone once closed_)
  std::shared_ptr<MemoryPool> pool_;  // (outlives the group while its arrays live)
  StagingOptions options_;
  std::mutex mu_;
  std::atomic<bool> closed_{false};
  std::unique_ptr<DeviceStaging> staging_;  // made on the first call (it loads the CUDA runtime)
};

}  // namespace rdmacoll
