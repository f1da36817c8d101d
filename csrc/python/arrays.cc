#include "python/arrays.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"

namespace rdmacoll {

DataType dtypeOf(const py::dtype& dt) {
  if (dt.byteorder() == '>') {  // (NumPy writes '<' or '=' for native on little-endian hosts)
    throw ArgumentError("dtype " + py::str(dt).cast<std::string>() +
                        " has non-native byte order; convert with x.astype(x.dtype.newbyteorder('='))");
  }
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'f') {
    if (size == 2) return DataType::kFloat16;
    if (size == 4) return DataType::kFloat32;
    if (size == 8) return DataType::kFloat64;
  } else if (kind == 'i') {
    if (size == 1) return DataType::kInt8;
    if (size == 2) return DataType::kInt16;
    if (size == 4) return DataType::kInt32;
    if (size == 8) return DataType::kInt64;
  } else if (kind == 'u') {
    if (size == 1) return DataType::kUInt8;
    if (size == 2) return DataType::kUInt16;
    if (size == 4) return DataType::kUInt32;
    if (size == 8) return DataType::kUInt64;
  } else if (kind == 'b' && size == 1) {
    return DataType::kBool;
  } else if (size == 2 && py::str(dt.attr("name")).cast<std::string>() == "bfloat16") {
    return DataType::kBFloat16;
  }
  throw ArgumentError(
      "unsupported dtype " + py::str(dt).cast<std::string>() +
      "; supported: float16, bfloat16, float32, float64, int32, int64, uint8, int8, int16 (these reduce), "
      "bool, uint16, uint32, uint64 (these move: allgather, broadcast, alltoall)");
}

py::array asArray(py::handle x, const char* what) {
  if (py::isinstance<py::array>(x)) return py::reinterpret_borrow<py::array>(x);
  if (py::hasattr(x, "__dlpack__")) {
    try {
      return py::module_::import("numpy").attr("from_dlpack")(x);
    } catch (py::error_already_set& e) {
      // DLPack device type 1 is the CPU; anything else (CUDA, ROCm...) lives where the
      // core cannot reach it yet.
      bool onCpu = true;
      try {
        if (py::hasattr(x, "__dlpack_device__"))
          onCpu = x.attr("__dlpack_device__")().cast<py::tuple>()[0].cast<int>() == 1;
      } catch (py::error_already_set&) {
      }
      throw ArgumentError(std::string(what) + ": cannot view this object without a copy (" + e.what() + ")" +
                          (onCpu ? std::string()
                                 : "; GPU memory goes through allreduce, broadcast, allgather, reducescatter "
                                   "and alltoall (rdmacoll.DeviceArray); this call takes host memory"));
    }
  }
  if (PyObject_CheckBuffer(x.ptr())) return py::module_::import("numpy").attr("asarray")(x);
  throw ArgumentError(std::string(what) + " must be a NumPy array or expose the buffer protocol or DLPack, got " +
                      py::str(py::type::of(x)).cast<std::string>());
}

py::array contiguousInput(py::handle x, const char* what) {
  py::array a = asArray(x, what);
  if (!(a.flags() & py::array::c_style)) {
    throw ArgumentError(std::string(what) + " is not C-contiguous; pass numpy.ascontiguousarray(x)");
  }
  return a;
}

void checkOut(const py::array& in, const py::array& out) {
  if (!(out.flags() & py::array::c_style))
    throw ArgumentError("out is not C-contiguous; pass numpy.ascontiguousarray(x)");
  if (!out.writeable()) throw ArgumentError("out is read-only");
  if (!out.dtype().is(in.dtype()) && dtypeOf(out.dtype()) != dtypeOf(in.dtype())) {
    throw ArgumentError("out has dtype " + py::str(out.dtype()).cast<std::string>() + ", input has " +
                        py::str(in.dtype()).cast<std::string>());
  }
  if (out.ndim() != in.ndim() || !std::equal(in.shape(), in.shape() + in.ndim(), out.shape())) {
    throw ArgumentError("out has shape " + py::str(py::tuple(out.attr("shape"))).cast<std::string>() + ", input has " +
                        py::str(py::tuple(in.attr("shape"))).cast<std::string>());
  }
}

size_t rowsOf(const py::array& a) { return a.ndim() == 0 ? 1 : static_cast<size_t>(a.shape(0)); }

size_t rowElemsOf(const py::array& a) {
  size_t n = 1;
  for (py::ssize_t i = 1; i < a.ndim(); ++i) n *= static_cast<size_t>(a.shape(i));
  return n;
}

std::vector<py::ssize_t> shapeWithRows(const py::array& a, size_t rows) {
  // A 0-d array is one row of one element (rowsOf): the result is 1-D. (Its shape()
  // has no entries to read.)
  std::vector<py::ssize_t> dims(a.shape(), a.shape() + a.ndim());
  if (dims.empty()) dims.push_back(0);
  dims[0] = static_cast<py::ssize_t>(rows);
  return dims;
}

py::array wrapBlock(const py::dtype& dt, const std::vector<py::ssize_t>& dims, std::shared_ptr<MemoryPool> pool,
                    MemoryPool::Block* block) {
  using Owner = std::pair<std::shared_ptr<MemoryPool>, MemoryPool::Block*>;
  auto* owner = new Owner(std::move(pool), block);
  py::capsule base(owner, [](void* p) {
    auto* o = static_cast<Owner*>(p);
    o->first->release(o->second);
    delete o;
  });
  return py::array(dt, dims, {}, block->data, base);
}

PoolResult::~PoolResult() {
  if (block_) pool_->release(block_);
}

void* PoolResult::allocate(size_t bytes) {
  block_ = pool_->acquire(bytes);
  return block_->data;
}

py::array PoolResult::adopt(const py::dtype& dt, const std::vector<py::ssize_t>& dims) {
  if (block_ == nullptr) allocate(0);
  return wrapBlock(dt, dims, pool_, std::exchange(block_, nullptr));
}

}  // namespace rdmacoll
