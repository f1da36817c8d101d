// The bindings of GPU memory: _core.DeviceCollectives (python/device.h) and
// _core.cuda_runtime() (what the CUDA runtime loader finds: doctor, tests).
#include "python/device.h"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"
#include "device/cuda.h"
#include "python/arrays.h"
#include "python/bindings.h"
#include "python/operation.h"

namespace py = pybind11;

namespace rdmacoll {

DeviceStaging& PyDevice::staging() {
  if (closed_) throw Error("rdmacoll is shut down: call rdmacoll.init() again");
  if (!staging_) staging_ = std::make_unique<DeviceStaging>(group_, options_);
  return *staging_;
}

void PyDevice::close() {
  std::lock_guard<std::mutex> g(mu_);
  staging_.reset();
  closed_ = true;
}

bool PyDevice::pinned() {
  py::gil_scoped_release release;
  std::lock_guard<std::mutex> g(mu_);
  return staging().pinned();
}

int PyDevice::deviceOf(uintptr_t ptr, size_t nbytes) {
  // (the runtime alone: an address no GPU owns is refused before the ring is made)
  return deviceHolding(cuda::runtime(options_.runtimeLibrary), reinterpret_cast<const void*>(ptr), nbytes, "the input");
}

void PyDevice::run(Request& r, uintptr_t in, uintptr_t out, size_t count, int dtype, int device, uintptr_t stream,
                   py::handle name, py::handle shape) {
  if (dtype < 0 || dtype >= kNumDataTypes) throw ArgumentError("unknown dtype code " + std::to_string(dtype));
  r.in = reinterpret_cast<const void*>(in);
  r.out = reinterpret_cast<void*>(out);
  r.count = count;
  r.dtype = static_cast<DataType>(dtype);
  setName(r, name);
  if (!shape.is_none()) setShape(r, py::none(), 0, shape);
  if (device < 0) device = deviceOf(in, count * dtypeSize(r.dtype));
  try {
    py::gil_scoped_release release;  // (first: a thread waiting for mu_ holds no interpreter)
    std::lock_guard<std::mutex> g(mu_);
    staging().run(r, device, reinterpret_cast<cuda::Stream>(stream));
  } catch (const Interrupted&) {
    throw py::error_already_set();  // the KeyboardInterrupt the signal handler set
  }
}

void PyDevice::allreduce(uintptr_t in, uintptr_t out, size_t count, int dtype, py::handle op, int device,
                         uintptr_t stream, py::handle name, py::handle shape) {
  Request r;
  r.collective = Collective::kAllreduce;
  r.op = opOf(op);
  run(r, in, out, count, dtype, device, stream, name, shape);
}

void PyDevice::broadcast(uintptr_t in, uintptr_t out, size_t count, int dtype, int root, int device, uintptr_t stream,
                         py::handle name, py::handle shape) {
  Request r;
  r.collective = Collective::kBroadcast;
  r.root = root;
  run(r, in, out, count, dtype, device, stream, name, shape);
}

py::array PyDevice::download(uintptr_t ptr, size_t nbytes, int device, uintptr_t stream) {
  if (device < 0) device = deviceOf(ptr, nbytes);
  if (closed_) throw Error("rdmacoll is shut down: call rdmacoll.init() again");
  py::array host = wrapBlock(py::dtype("uint8"), {static_cast<py::ssize_t>(nbytes)}, pool_, pool_->acquire(nbytes));
  void* h = host.mutable_data();
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> g(mu_);
    staging().download(h, reinterpret_cast<const void*>(ptr), nbytes, device, reinterpret_cast<cuda::Stream>(stream));
  }
  return host;
}

void PyDevice::upload(py::handle hostObj, uintptr_t ptr, int device, uintptr_t stream) {
  py::array host = contiguousInput(hostObj, "upload source");
  const size_t n = static_cast<size_t>(host.nbytes());
  if (device < 0) device = deviceOf(ptr, n);
  const void* h = host.data();
  py::gil_scoped_release release;
  std::lock_guard<std::mutex> g(mu_);
  staging().upload(reinterpret_cast<void*>(ptr), h, n, device, reinterpret_cast<cuda::Stream>(stream));
}

}  // namespace rdmacoll

using namespace rdmacoll;

void bindDevice(py::module_& m) {
  using namespace pybind11::literals;
  py::class_<PyDevice>(m, "DeviceCollectives",
                       "A communicator's collectives on CUDA memory (Communicator.device): staged through "
                       "page-locked host memory in chunks (runtime/staging.h)")
      .def("allreduce", &PyDevice::allreduce, "in_ptr"_a, "out_ptr"_a, "count"_a, "dtype"_a, "op"_a, "device"_a = -1,
           "stream"_a = 0, "name"_a = py::none(), "shape"_a = py::none(),
           "Ordered after `stream`'s work; the result is ready on it when this returns")
      .def("broadcast", &PyDevice::broadcast, "in_ptr"_a, "out_ptr"_a, "count"_a, "dtype"_a, "root"_a, "device"_a = -1,
           "stream"_a = 0, "name"_a = py::none(), "shape"_a = py::none())
      .def("download", &PyDevice::download, "ptr"_a, "nbytes"_a, "device"_a = -1, "stream"_a = 0,
           "The bytes of device memory in a uint8 pool array (after `stream`'s work)")
      .def("upload", &PyDevice::upload, "host"_a, "ptr"_a, "device"_a = -1, "stream"_a = 0,
           "A host array's bytes into device memory (ready on `stream`)")
      .def("device_of", &PyDevice::deviceOf, "ptr"_a, "nbytes"_a,
           "The CUDA device holding [ptr, ptr + nbytes); raises when it is not device memory")
      .def_property_readonly("pinned", &PyDevice::pinned, "Whether the staging memory is page-locked");
  m.def(
      "cuda_runtime",
      [](const std::string& library) {
        py::dict out;
        std::string why;
        const cuda::Runtime* rt = cuda::tryRuntime(library, &why);
        if (!rt) {
          out["error"] = why;
          return out;
        }
        int runtimeVersion = 0, driverVersion = 0, devices = 0;
        rt->runtimeGetVersion(&runtimeVersion);
        rt->driverGetVersion(&driverVersion);
        const int rc = rt->getDeviceCount(&devices);
        out["library"] = rt->library;
        out["runtime_version"] = runtimeVersion;
        out["driver_version"] = driverVersion;
        out["devices"] = rc == 0 ? devices : 0;
        if (rc != 0) {
          out["error"] = std::string(rt->getErrorString(rc)) + " (cuda error " + std::to_string(rc) + ")";
          rt->getLastError();
        }
        return out;
      },
      py::arg("library") = "",
      "The CUDA runtime rdmacoll loads for GPU tensors (the first call's `library` is kept): "
      "{library, runtime_version, driver_version, devices} or {error}; never raises.");
}
