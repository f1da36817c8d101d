// The one Python/C++ boundary. Constants (dtypes, ops, algorithm names) are exported from
// here, never restated in Python. A synchronous call validates here and runs the
// collective inline on the caller's thread (after any asynchronous work submitted
// before it: runtime/async.h); *_async calls queue it and return a Handle.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pthread.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "algorithms/registry.h"
#include "comm/communicator.h"
#include "common/error.h"
#include "python/bindings.h"
#include "reduce/reduce.h"
#include "runtime/async.h"
#include "runtime/collectives.h"
#include "tuning/select.h"

namespace py = pybind11;
using namespace rdmacoll;

namespace {

// Waits release the GIL while they sleep and poll for Ctrl-C. Collectives also run on
// the progress thread, which never holds the GIL: there the hooks do nothing.
class PyHooks : public WaitHooks {
 public:
  void releaseInterpreter() override {
    if (PyGILState_Check()) state() = PyEval_SaveThread();
  }
  void acquireInterpreter() override {
    if (state()) PyEval_RestoreThread(std::exchange(state(), nullptr));
  }
  bool signalPending() override { return PyGILState_Check() && PyErr_CheckSignals() != 0; }

 private:
  static PyThreadState*& state() {
    thread_local PyThreadState* s = nullptr;
    return s;
  }
};

DataType dtypeOf(const py::dtype& dt) {
  if (dt.byteorder() == '>') {  // (NumPy writes '<' or '=' for native on little-endian hosts)
    throw Error("dtype " + py::str(dt).cast<std::string>() +
                " has non-native byte order; convert with x.astype(x.dtype.newbyteorder('='))");
  }
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'f') {
    if (size == 2) return DataType::kFloat16;
    if (size == 4) return DataType::kFloat32;
    if (size == 8) return DataType::kFloat64;
  } else if (kind == 'i') {
    if (size == 4) return DataType::kInt32;
    if (size == 8) return DataType::kInt64;
  } else if (kind == 'u' && size == 1) {
    return DataType::kUInt8;
  } else if (size == 2 && py::str(dt.attr("name")).cast<std::string>() == "bfloat16") {
    return DataType::kBFloat16;
  }
  throw Error("unsupported dtype " + py::str(dt).cast<std::string>() +
              "; supported: float16, bfloat16, float32, float64, int32, int64, uint8");
}

// An ndarray view of x without copying: ndarrays as they are, DLPack producers (PyTorch,
// CuPy...) through numpy.from_dlpack, other buffer-protocol objects through numpy.asarray.
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
        if (py::hasattr(x, "__dlpack_device__")) onCpu = x.attr("__dlpack_device__")().cast<py::tuple>()[0].cast<int>() == 1;
      } catch (py::error_already_set&) {
      }
      throw Error(std::string(what) + ": cannot view this object without a copy (" + e.what() + ")" +
                  (onCpu ? std::string() : "; GPU tensors are not supported yet, pass CPU memory"));
    }
  }
  if (PyObject_CheckBuffer(x.ptr())) return py::module_::import("numpy").attr("asarray")(x);
  throw Error(std::string(what) + " must be a NumPy array or expose the buffer protocol or DLPack, got " +
              py::str(py::type::of(x)).cast<std::string>());
}

void requireContiguous(const py::array& a, const char* what) {
  if (!(a.flags() & py::array::c_style)) {
    throw Error(std::string(what) + " is not C-contiguous; pass numpy.ascontiguousarray(x)");
  }
}

// What *_async returns: poll() and wait() (rdmacoll.poll / rdmacoll.synchronize).
struct PyHandle {
  AsyncEngine::Handle op;
  std::function<py::object()> result;
  py::object keep;  // the arrays the operation reads and writes
  std::shared_ptr<AsyncEngine> engine;

  bool poll() const { return engine->poll(op); }
  py::object wait() {
    bool finished;
    {
      py::gil_scoped_release r;
      finished = engine->wait(op, [] {
        py::gil_scoped_acquire a;
        return PyErr_CheckSignals() != 0;
      });
    }
    if (!finished) throw py::error_already_set();  // KeyboardInterrupt; the op goes on
    if (!op->error.empty()) throw Error(op->error);
    return result();
  }
};

class PyCommunicator {
 public:
  PyCommunicator(int rank, int size, int localSize, const py::dict& cfg)
      : hooks_(std::make_shared<PyHooks>()) {
    Config c = configFromDict(cfg);
    comm_ = std::make_unique<Communicator>(rank, size, localSize, c, hooks_);
  }

  py::bytes address() const {
    auto a = comm_->address();
    return py::bytes(reinterpret_cast<const char*>(a.data()), a.size());
  }

  void connect(const std::vector<std::string>& addresses) {
    std::vector<transport::Bytes> all;
    for (const auto& s : addresses) all.emplace_back(s.begin(), s.end());
    comm_->connect(all);
  }

  // A collective ready to run: `run` touches no Python object (it may run on the
  // progress thread); `result` builds the Python result afterwards, with the GIL;
  // `keep` holds the Python objects whose memory run uses.
  struct Prepared {
    std::function<void()> run;
    std::function<py::object()> result;
    py::object keep;
  };

  py::object runNow(const Prepared& p) {
    runSync(p.run);
    return p.result();
  }
  void runSync(const std::function<void()>& fn) {
    try {
      engine_->runInline(fn);
    } catch (const Interrupted&) {
      throw py::error_already_set();
    }
  }

  // The synchronous allreduce is the hot path: validated and run without building a
  // Prepared (no std::function with captures, no name copy).
  py::object allreduce(py::handle x, py::handle outObj, int op, py::handle name) {
    check();
    InOut io(*this, x, outObj, "allreduce");
    checkOp(op);
    Name nm(name);
    const void* src = io.in.data();
    void* dst = io.out.mutable_data();
    const size_t count = static_cast<size_t>(io.in.size());
    runSync([&] {
      rdmacoll::allreduce(*comm_, src, dst, count, io.dtype, static_cast<ReduceOp>(op), nm.p,
                                           static_cast<size_t>(nm.n));
    });
    return std::move(io.result);
  }

  // An input and its output: `out` when given (checked against the input), else an
  // array from the pool; `result` is what the call returns.
  struct InOut {
    py::array in, out;  // (not default-constructed: pybind11 would allocate empty arrays)
    py::object result;
    DataType dtype;
    InOut(PyCommunicator& c, py::handle x, py::handle outObj, const char* what)
        : in(input(x, what)), out(outObj.is_none() ? c.poolArray(in) : asArray(outObj, "out")) {
      dtype = dtypeOf(in.dtype());
      if (outObj.is_none()) {
        result = out;
      } else {
        checkOut(in, out);
        result = py::reinterpret_borrow<py::object>(outObj);
      }
    }
  };

  Prepared prepareAllreduce(py::handle x, py::handle outObj, int op, py::handle name) {
    check();
    InOut io(*this, x, outObj, "allreduce");
    checkOp(op);
    const void* src = io.in.data();
    void* dst = io.out.mutable_data();
    const size_t count = static_cast<size_t>(io.in.size());
    const DataType dt = io.dtype;
    std::string nm = nameOf(name);
    return {[this, src, dst, count, dt, op, nm] {
              rdmacoll::allreduce(*comm_, src, dst, count, dt, static_cast<ReduceOp>(op),
                                                   nm.data(), nm.size());
            },
            [result = io.result] { return result; }, py::make_tuple(io.in, io.out)};
  }

  static void checkOp(int op) {
    if (op < 0 || op >= kNumReduceOps) {
      throw Error("unknown op " + std::to_string(op) + "; use rdmacoll.Sum, Average, Min, Max or Product");
    }
  }
  static std::string nameOf(py::handle name) {
    Name nm(name);
    return nm.p ? std::string(nm.p, static_cast<size_t>(nm.n)) : std::string();
  }

  // out must be a writeable contiguous array of the input's shape and dtype.
  static void checkOut(const py::array& in, const py::array& out) {
    requireContiguous(out, "out");
    if (!out.writeable()) throw Error("out is read-only");
    if (!out.dtype().is(in.dtype()) && dtypeOf(out.dtype()) != dtypeOf(in.dtype())) {
      throw Error("out has dtype " + py::str(out.dtype()).cast<std::string>() + ", input has " +
                  py::str(in.dtype()).cast<std::string>());
    }
    if (out.ndim() != in.ndim() || !std::equal(in.shape(), in.shape() + in.ndim(), out.shape())) {
      throw Error("out has shape " + py::str(py::tuple(out.attr("shape"))).cast<std::string>() +
                  ", input has " + py::str(py::tuple(in.attr("shape"))).cast<std::string>());
    }
  }

  // Rows of x: its first dimension (a 0-d array is one row of one element).
  static size_t rowsOf(const py::array& a) { return a.ndim() == 0 ? 1 : static_cast<size_t>(a.shape(0)); }
  static size_t rowElemsOf(const py::array& a) {
    size_t n = 1;
    for (py::ssize_t i = 1; i < a.ndim(); ++i) n *= static_cast<size_t>(a.shape(i));
    return n;
  }
  static std::vector<py::ssize_t> shapeWithRows(const py::array& a, size_t rows) {
    std::vector<py::ssize_t> dims(a.shape(), a.shape() + std::max<py::ssize_t>(a.ndim(), 1));
    dims[0] = static_cast<py::ssize_t>(rows);
    return dims;
  }
  static py::array input(py::handle x, const char* what) {
    py::array a = asArray(x, what);
    requireContiguous(a, what);
    return a;
  }
  struct Name {
    const char* p = nullptr;
    Py_ssize_t n = 0;
    explicit Name(py::handle name) {
      if (name.is_none()) return;
      if (!PyUnicode_Check(name.ptr())) throw Error("name must be a str");
      p = PyUnicode_AsUTF8AndSize(name.ptr(), &n);
      if (p == nullptr) throw py::error_already_set();
    }
  };
  // Output of a collective whose size is known only once the peers' headers arrived:
  // a pool block, wrapped as an array afterwards.
  struct PoolOutput : algorithms::Output {
    std::shared_ptr<MemoryPool> pool;
    MemoryPool::Block* block = nullptr;
    explicit PoolOutput(std::shared_ptr<MemoryPool> p) : pool(std::move(p)) {}
    ~PoolOutput() override {
      if (block) pool->release(block);
    }
    void* allocate(size_t bytes) override {
      block = pool->acquire(bytes);
      return block->mem->data();
    }
  };
  Prepared prepareAllgather(py::handle x, py::handle name) {
    check();
    py::array in = input(x, "allgather input");
    const DataType dt = dtypeOf(in.dtype());
    auto out = std::make_shared<PoolOutput>(comm_->pool());
    auto rows = std::make_shared<size_t>(0);
    const void* src = in.data();
    const size_t myRows = rowsOf(in), rowElems = rowElemsOf(in);
    std::string nm = nameOf(name);
    py::dtype pdt = in.dtype();
    std::vector<py::ssize_t> dims = shapeWithRows(in, 0);
    return {[this, src, myRows, rowElems, dt, nm, out, rows] {
              *rows = rdmacoll::allgather(*comm_, src, myRows, rowElems, dt, nm.data(), nm.size(), *out);
            },
            [this, out, rows, pdt, dims]() mutable -> py::object {
              dims[0] = static_cast<py::ssize_t>(*rows);
              return adopt(*out, pdt, dims);
            },
            in};
  }

  Prepared prepareBroadcast(py::handle x, int root, py::handle outObj, py::handle name) {
    check();
    InOut io(*this, x, outObj, "broadcast");
    const void* src = io.in.data();
    void* dst = io.out.mutable_data();
    const size_t count = static_cast<size_t>(io.in.size());
    const DataType dt = io.dtype;
    std::string nm = nameOf(name);
    return {[this, src, dst, count, dt, root, nm] {
              rdmacoll::broadcast(*comm_, src, dst, count, dt, root, nm.data(), nm.size());
            },
            [result = io.result] { return result; }, py::make_tuple(io.in, io.out)};
  }

  Prepared prepareReducescatter(py::handle x, int op, py::handle name) {
    check();
    py::array in = input(x, "reducescatter input");
    const DataType dt = dtypeOf(in.dtype());
    checkOp(op);
    const size_t rowElems = rowElemsOf(in);
    const size_t mine = reducescatterRows(rowsOf(in), comm_->size(), comm_->rank());
    py::array out = wrapBlock(in.dtype(), shapeWithRows(in, mine), mine * rowElems * in.itemsize());
    const void* src = in.data();
    void* dst = out.mutable_data();
    const size_t count = static_cast<size_t>(in.size());
    std::string nm = nameOf(name);
    return {[this, src, dst, count, rowElems, dt, op, nm] {
              rdmacoll::reducescatter(*comm_, src, dst, count, rowElems, dt, static_cast<ReduceOp>(op), nm.data(),
                                      nm.size());
            },
            [out] { return py::object(out); }, py::make_tuple(in, out)};
  }

  Prepared prepareAlltoall(py::handle x, py::handle splitsObj, py::handle name) {
    check();
    py::array in = input(x, "alltoall input");
    const DataType dt = dtypeOf(in.dtype());
    const int p = comm_->size();
    const size_t rows = rowsOf(in);
    auto splits = std::make_shared<std::vector<uint64_t>>(p);
    auto received = std::make_shared<std::vector<uint64_t>>(p);
    if (splitsObj.is_none()) {
      if (rows % p != 0) {
        throw Error("alltoall: the first dimension (" + std::to_string(rows) + ") is not divisible by size() (" +
                    std::to_string(p) + "); pass splits");
      }
      std::fill(splits->begin(), splits->end(), rows / p);
    } else {
      // Any sequence of integers (list, NumPy array, tensor): small, converted once.
      py::list l = py::module_::import("numpy").attr("asarray")(splitsObj).attr("tolist")();
      if (static_cast<int>(l.size()) != p) {
        throw Error("alltoall: splits has " + std::to_string(l.size()) + " entries, size() is " + std::to_string(p));
      }
      uint64_t total = 0;
      for (int q = 0; q < p; ++q) {
        long long v = l[q].cast<long long>();
        if (v < 0) throw Error("alltoall: negative split");
        (*splits)[q] = static_cast<uint64_t>(v);
        total += (*splits)[q];
      }
      if (total != rows) {
        throw Error("alltoall: splits sum to " + std::to_string(total) + " but the first dimension is " +
                    std::to_string(rows));
      }
    }
    auto out = std::make_shared<PoolOutput>(comm_->pool());
    auto total = std::make_shared<size_t>(0);
    const void* src = in.data();
    const size_t rowElems = rowElemsOf(in);
    std::string nm = nameOf(name);
    py::dtype pdt = in.dtype();
    std::vector<py::ssize_t> dims = shapeWithRows(in, 0);
    return {[this, src, rowElems, splits, received, dt, nm, out, total] {
              *total = rdmacoll::alltoall(*comm_, src, rowElems, splits->data(), received->data(), dt, nm.data(),
                                          nm.size(), *out);
            },
            [this, out, total, received, pdt, dims]() mutable -> py::object {
              dims[0] = static_cast<py::ssize_t>(*total);
              py::array result = adopt(*out, pdt, dims);
              py::array_t<int64_t> rec(static_cast<py::ssize_t>(received->size()));
              for (size_t q = 0; q < received->size(); ++q) rec.mutable_at(q) = static_cast<int64_t>((*received)[q]);
              return py::make_tuple(result, rec);
            },
            in};
  }

  Prepared prepareBarrier() {
    check();
    return {[this] { rdmacoll::barrier(*comm_); }, [] { return py::none(); }, py::none()};
  }

  py::object allgather(py::handle x, py::handle name) { return runNow(prepareAllgather(x, name)); }
  py::object broadcast(py::handle x, int root, py::handle out, py::handle name) {
    return runNow(prepareBroadcast(x, root, out, name));
  }
  py::object reducescatter(py::handle x, int op, py::handle name) { return runNow(prepareReducescatter(x, op, name)); }
  py::object alltoall(py::handle x, py::handle splits, py::handle name) {
    return runNow(prepareAlltoall(x, splits, name));
  }
  void barrier() { runNow(prepareBarrier()); }

  // Asynchronous forms: queued in submission order, run by the progress thread or by
  // whoever waits first.
  PyHandle submit(Prepared p) {
    PyHandle h;
    h.op = engine_->submit(std::move(p.run));
    h.result = std::move(p.result);
    h.keep = std::move(p.keep);
    h.engine = engine_;
    return h;
  }
  size_t outstanding() { return engine_->outstanding(); }

  // An array over out's pool block (or an empty one): the array now owns the block.
  py::array adopt(PoolOutput& out, const py::dtype& dt, const std::vector<py::ssize_t>& dims) {
    if (out.block == nullptr) out.allocate(0);
    MemoryPool::Block* b = out.block;
    out.block = nullptr;
    return wrapExisting(dt, dims, out.pool, b);
  }

  py::array empty(py::object shape, py::object dtype) {
    check();
    py::dtype dt = py::dtype::from_args(dtype);
    dtypeOf(dt);
    std::vector<py::ssize_t> dims;
    if (py::isinstance<py::int_>(shape)) {
      dims.push_back(shape.cast<py::ssize_t>());
    } else {
      for (auto d : shape) dims.push_back(d.cast<py::ssize_t>());
    }
    size_t n = 1;
    for (auto d : dims) {
      if (d < 0) throw Error("negative dimension in rdmacoll.empty");
      n *= static_cast<size_t>(d);
    }
    return wrapBlock(dt, dims, n * dt.itemsize());
  }

  std::string lastAlgorithm() const { return comm_ ? comm_->lastAlgorithm() : ""; }
  size_t poolBytes() const { return comm_->pool()->bytesMapped(); }
  std::string transport() const { return comm_->transportName(); }
  // How each peer is reached ("" for this rank): the endpoint's description.
  std::vector<std::string> peerTransports() {
    std::vector<std::string> out(comm_->size());
    for (int r = 0; r < comm_->size(); ++r) {
      if (r != comm_->rank() && comm_->peer(r).ep) out[r] = comm_->peer(r).ep->describe();
    }
    return out;
  }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  bool oversubscribed() const { return comm_->oversubscribed(); }
  double ranksPerCpu() const { return comm_->ranksPerCpu(); }
  std::string selected(size_t bytes) const { return tuning::selectAllreduce(*comm_, bytes).name; }
  // Whether the allreduce algorithm `name` can run a message of `bytes` in this job
  // (hierarchical needs several hosts, direct same-host peers, eager small messages).
  bool usable(const std::string& name, size_t bytes) const {
    const algorithms::AllreduceAlgorithm* a = algorithms::findAllreduce(name);
    if (!a) throw Error("unknown allreduce algorithm '" + name + "'");
    return a->usable(*comm_, bytes);
  }
  void close() {
    if (engine_) {
      py::gil_scoped_release r;  // queued work finishes (it never needs the GIL)
      engine_.reset();
    }
    comm_.reset();
  }

 private:


  void check() const {
    if (!comm_) throw Error("rdmacoll is shut down: call rdmacoll.init() again");
  }

  py::array poolArray(const py::array& like) {
    std::vector<py::ssize_t> dims(like.shape(), like.shape() + like.ndim());
    return wrapBlock(like.dtype(), dims, static_cast<size_t>(like.nbytes()));
  }

  // A NumPy array over a pool block; the block returns to the pool with the array.
  py::array wrapBlock(const py::dtype& dt, const std::vector<py::ssize_t>& dims, size_t bytes) {
    std::shared_ptr<MemoryPool> pool = comm_->pool();
    return wrapExisting(dt, dims, pool, pool->acquire(bytes));
  }
  static py::array wrapExisting(const py::dtype& dt, const std::vector<py::ssize_t>& dims,
                                std::shared_ptr<MemoryPool> pool, MemoryPool::Block* b) {
    auto* owner = new std::pair<std::shared_ptr<MemoryPool>, MemoryPool::Block*>(std::move(pool), b);
    py::capsule base(owner, [](void* p) {
      auto* o = static_cast<std::pair<std::shared_ptr<MemoryPool>, MemoryPool::Block*>*>(p);
      o->first->release(o->second);
      delete o;
    });
    return py::array(dt, dims, {}, b->mem->data(), base);
  }

  std::shared_ptr<AsyncEngine> engine_ = std::make_shared<AsyncEngine>();
  std::shared_ptr<PyHooks> hooks_;
  std::unique_ptr<Communicator> comm_;
};

}  // namespace


PYBIND11_MODULE(_core, m) {
  m.doc() = "rdmacoll core (C++): communicator, transports, algorithms";

  static py::exception<Error> exc(m, "RdmacollError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(exc.ptr(), e.what());
    }
  });

  m.attr("Sum") = static_cast<int>(ReduceOp::kSum);
  m.attr("Average") = static_cast<int>(ReduceOp::kAverage);
  m.attr("Min") = static_cast<int>(ReduceOp::kMin);
  m.attr("Max") = static_cast<int>(ReduceOp::kMax);
  m.attr("Product") = static_cast<int>(ReduceOp::kProduct);
  py::dict dtypes;
  for (int i = 0; i < kNumDataTypes; ++i) dtypes[dtypeName(static_cast<DataType>(i))] = i;
  m.attr("DTYPES") = dtypes;
  py::dict ops;
  for (int i = 0; i < kNumReduceOps; ++i) ops[opName(static_cast<ReduceOp>(i))] = i;
  m.attr("OPS") = ops;
  // Defaults of the settings bootstrap reads from RDMACOLL_* variables.
  m.attr("DEFAULT_CONFIG") = configToDict(Config{});
  m.attr("PACKED_MEMORY_BYTES") = transport::PackedMemory::kBytes;  // what travels per region

  m.def("algorithms", [](const std::string& collective) {
    std::vector<std::pair<std::string, std::string>> v;
    auto list = [&](const auto& all) {
      for (const auto& a : all) v.emplace_back(a.name, a.description);
    };
    if (collective == "allreduce") list(algorithms::allreduceAlgorithms());
    else if (collective == "allgather") list(algorithms::allgatherAlgorithms());
    else if (collective == "broadcast") list(algorithms::broadcastAlgorithms());
    else if (collective == "reducescatter") list(algorithms::reducescatterAlgorithms());
    else if (collective == "alltoall") list(algorithms::alltoallAlgorithms());
    else throw Error("algorithms: unknown collective '" + collective +
                     "' (allreduce, allgather, broadcast, reducescatter, alltoall)");
    return v;
  }, py::arg("collective") = "allreduce", "Registered algorithms of a collective: (name, description).");

  py::class_<PyHandle>(m, "Handle", "An asynchronous collective in flight")
      .def("poll", &PyHandle::poll, "True once the operation has finished")
      .def("wait", &PyHandle::wait, "Wait for the operation; returns its result or raises its error");

  py::class_<PyCommunicator>(m, "Communicator")
      .def(py::init<int, int, int, const py::dict&>())
      .def("address", &PyCommunicator::address)
      .def("connect", &PyCommunicator::connect)
      .def("allreduce", &PyCommunicator::allreduce)
      .def("empty", &PyCommunicator::empty)
      .def("allgather", &PyCommunicator::allgather)
      .def("broadcast", &PyCommunicator::broadcast)
      .def("reducescatter", &PyCommunicator::reducescatter)
      .def("alltoall", &PyCommunicator::alltoall)
      .def("barrier", &PyCommunicator::barrier)
      .def("allreduce_async", [](PyCommunicator& c, py::handle x, py::handle out, int op, py::handle name) {
        return c.submit(c.prepareAllreduce(x, out, op, name));
      })
      .def("allgather_async", [](PyCommunicator& c, py::handle x, py::handle name) {
        return c.submit(c.prepareAllgather(x, name));
      })
      .def("broadcast_async", [](PyCommunicator& c, py::handle x, int root, py::handle out, py::handle name) {
        return c.submit(c.prepareBroadcast(x, root, out, name));
      })
      .def("reducescatter_async", [](PyCommunicator& c, py::handle x, int op, py::handle name) {
        return c.submit(c.prepareReducescatter(x, op, name));
      })
      .def("alltoall_async", [](PyCommunicator& c, py::handle x, py::handle splits, py::handle name) {
        return c.submit(c.prepareAlltoall(x, splits, name));
      })
      .def("barrier_async", [](PyCommunicator& c) { return c.submit(c.prepareBarrier()); })
      .def_property_readonly("outstanding", &PyCommunicator::outstanding)
      .def("close", &PyCommunicator::close)
      .def("selected_algorithm", &PyCommunicator::selected)
      .def("usable", &PyCommunicator::usable, "Whether an allreduce algorithm can run (name, bytes) here")
      .def_property_readonly("last_algorithm", &PyCommunicator::lastAlgorithm)
      .def_property_readonly("pool_bytes", &PyCommunicator::poolBytes)
      .def_property_readonly("transport", &PyCommunicator::transport)
      .def("peer_transports", &PyCommunicator::peerTransports)
      .def_property_readonly("rank", &PyCommunicator::rank)
      .def_property_readonly("size", &PyCommunicator::size)
      .def_property_readonly("oversubscribed", &PyCommunicator::oversubscribed)
      .def_property_readonly("ranks_per_cpu", &PyCommunicator::ranksPerCpu,
                             "The most local ranks per CPU of any host (>= 1): the cost model's scale.");

  bindTransportProbe(m);
  m.def("_view", [](py::handle x) { return asArray(x, "input"); },
        "An ndarray view of x without copying (ndarray, DLPack, buffer protocol).");
  bindSchedules(m);
  bindTuning(m);
  bindIbverbs(m);
  bindFuzzHooks(m);

  // Test hooks: the kernels and the ring arithmetic, without any transport.
  m.def("_reduce_local", [](int dtype, int op, py::array out, std::vector<py::array> inputs, double scale) {
    if (dtype < 0 || dtype >= kNumDataTypes || op < 0 || op >= kNumReduceOps) throw Error("bad dtype/op");
    if (inputs.empty()) throw Error("need at least one input");
    std::vector<const void*> ptrs;
    const size_t n = static_cast<size_t>(out.size());
    const size_t bytes = n * dtypeSize(static_cast<DataType>(dtype));
    if (static_cast<size_t>(out.nbytes()) != bytes) throw Error("out size does not match dtype");
    for (auto& a : inputs) {
      if (static_cast<size_t>(a.nbytes()) != bytes) throw Error("input size mismatch");
      ptrs.push_back(a.data());
    }
    void* dst = out.mutable_data();
    py::gil_scoped_release r;
    reduceN(static_cast<DataType>(dtype), static_cast<ReduceOp>(op), dst, ptrs.data(),
            static_cast<int>(ptrs.size()), n, scale);
  });
  m.def("_hash_descriptor", [](int coll, uint64_t seq, int dtype, uint64_t count, int op, int root,
                               uint64_t nameHash, int algo, uint64_t seg) {
    Descriptor d;
    d.collective = static_cast<uint8_t>(coll);
    d.seq = seq;
    d.dtype = static_cast<uint8_t>(dtype);
    d.count = count;
    d.op = static_cast<uint8_t>(op);
    d.root = root;
    d.nameHash = nameHash;
    d.algorithm = static_cast<uint8_t>(algo);
    d.segmentBytes = seg;
    return hashDescriptor(d);
  });
}
