#include "python/operation.h"

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"

namespace rdmacoll {

// Descriptor::shapeHash (comm/call.h): the input's shape with its first `skip` dimensions
// left out (allgather, alltoall: 1, the rows ranks contribute may differ), or the caller's
// own key (an int from _core.shape_hash: grouped collectives, which fuse their tensors,
// and join's stand-ins, which reduce zeros in place of a tensor they never saw).
void setShape(Request& r, py::handle input, py::ssize_t skip, py::handle key) {
  if (!key.is_none()) {
    if (!PyLong_Check(key.ptr())) throw ArgumentError("shape must be an int from _core.shape_hash, or None");
    r.shapeHash = static_cast<uint32_t>(key.cast<uint64_t>());
    return;
  }
  const auto a = py::reinterpret_borrow<py::array>(input);
  const py::ssize_t n = a.ndim();
  std::vector<int64_t> more(n > 8 ? n : 0);  // (no allocation per call for up to 8 dimensions)
  int64_t* dims = n > 8 ? more.data() : r.shape.dims;
  for (py::ssize_t i = 0; i < n; ++i) dims[i] = i < skip ? 0 : a.shape(i);
  r.shapeHash = hashShape(dims, static_cast<size_t>(n));
  if (n <= 8) {  // for messages: the dimensions left out of the hash show as *
    r.shape.ndims = static_cast<int8_t>(n);
    r.shape.skip = static_cast<uint8_t>(skip);
  }
}

// A name borrowed from a Python str for the duration of a call.
void setName(Request& r, py::handle name) {
  if (name.is_none()) return;
  if (!PyUnicode_Check(name.ptr())) throw ArgumentError("name must be a str");
  Py_ssize_t n = 0;
  r.name = PyUnicode_AsUTF8AndSize(name.ptr(), &n);
  if (r.name == nullptr) {  // (a lone surrogate: not UTF-8)
    PyErr_Clear();
    throw ArgumentError("name " + py::repr(name).cast<std::string>() + " cannot be encoded as UTF-8");
  }
  r.nameLen = static_cast<size_t>(n);
}

// An op from Python: one of the ints rdmacoll.Sum ... Product (anything else, a str or a
// float included, is an argument error, not pybind's TypeError).
ReduceOp opOf(py::handle o) {
  Py_ssize_t op = -1;
  if (PyIndex_Check(o.ptr()) && !PyBool_Check(o.ptr())) {  // (int, NumPy's integers)
    op = PyNumber_AsSsize_t(o.ptr(), nullptr);
    if (op == -1 && PyErr_Occurred()) PyErr_Clear();
  }
  if (op < 0 || op >= kNumReduceOps) {
    throw ArgumentError("unknown op " + py::repr(o).cast<std::string>() +
                        "; use rdmacoll.Sum, Average, Min, Max or Product");
  }
  return static_cast<ReduceOp>(op);
}

py::object Prepared::result(size_t rows) const {
  if (finish == Finish::kReady) return ready;
  std::vector<py::ssize_t> d = dims;
  d[0] = static_cast<py::ssize_t>(rows);
  py::array data = owned->result->adopt(dtype, d);
  if (finish == Finish::kRows) return std::move(data);
  py::array_t<int64_t> rec(static_cast<py::ssize_t>(owned->received.size()));
  for (size_t q = 0; q < owned->received.size(); ++q) rec.mutable_at(q) = static_cast<int64_t>(owned->received[q]);
  return py::make_tuple(data, rec);
}

Handle Handle::combine(py::object parts, py::object then, py::object value) {
  Handle h;
  h.then_ = std::move(then);
  if (parts.is_none()) {
    h.value_ = std::move(value);
  } else if (py::isinstance<Handle>(parts)) {
    h.parts_.push_back(parts);
    h.single_ = true;
  } else {
    for (py::handle p : parts) {
      if (!py::isinstance<Handle>(p)) throw ArgumentError("Handle parts must be Handles");
      h.parts_.push_back(py::reinterpret_borrow<py::object>(p));
    }
  }
  return h;
}

bool Handle::poll() {
  if (done_) return true;
  if (op_) return engine_->poll(op_);
  for (auto& p : parts_) {
    if (!p.cast<Handle&>().poll()) return false;
  }
  return true;
}

void Handle::addDoneCallback(py::object self, py::object fn) {
  if (!op_) {
    // Combined: its parts run in the order they were queued, so the last one done is
    // all done; made of a value: done now.
    if (done_ || parts_.empty()) {
      fn(self);
      return;
    }
    py::object last = parts_.back();
    last.cast<Handle&>().addDoneCallback(last, py::cpp_function([fn, self](py::object) { fn(self); }));
    return;
  }
  // The callable travels to the finishing thread; it is called and dropped with the GIL.
  auto call = std::shared_ptr<py::object>(new py::object(py::make_tuple(fn, self)), [](py::object* o) {
    py::gil_scoped_acquire g;
    delete o;
  });
  engine_->whenDone(op_, [call] {
    py::gil_scoped_acquire g;
    py::tuple args = *call;
    try {
      args[0](args[1]);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("rdmacoll Handle done callback");
    }
  });
}

py::object Handle::wait() {
  if (done_) return result_;
  // Another thread builds the result (it released the GIL in Python code): wait for it.
  // This thread building it already means a done callback waits from inside the build.
  const std::thread::id me = std::this_thread::get_id();
  while (builder_ != std::thread::id()) {
    if (builder_ == me) throw Error("Handle.wait() from inside its own completion (a done callback waited on it)");
    {
      py::gil_scoped_release r;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (done_) return result_;
  }
  struct Building {
    std::thread::id& builder;
    Building(std::thread::id& b, std::thread::id me) : builder(b) { builder = me; }
    ~Building() { builder = std::thread::id(); }
  };
  py::object value = value_;
  if (op_) {
    bool finished;
    {
      py::gil_scoped_release r;
      finished = engine_->wait(op_, [] {
        py::gil_scoped_acquire a;
        return PyErr_CheckSignals() != 0;
      });
    }
    if (!finished) throw py::error_already_set();  // KeyboardInterrupt; the op goes on
    if (done_) return result_;                     // another thread built it while this one waited
    if (builder_ != std::thread::id()) return wait();
    if (!op_->error.empty()) throw Error(op_->error);
  }
  Building building(builder_, me);
  if (op_) {
    value = prepared_->result(prepared_->owned ? prepared_->owned->rows : 0);
  } else if (single_) {
    value = parts_[0].cast<Handle&>().wait();
  } else if (!parts_.empty()) {
    py::list results;
    for (auto& p : parts_) results.append(p.cast<Handle&>().wait());
    value = results;
  }
  if (!then_.is_none()) value = then_(value);
  result_ = value;
  done_ = true;
  prepared_.reset();  // the arrays it kept alive, the pool block now owned by the result
  parts_.clear();
  then_ = py::none();
  value_ = py::none();
  return result_;
}

void bindHandle(py::module_& m) {
  py::class_<Handle>(m, "Handle",
                     R"(An asynchronous collective in flight (rdmacoll.poll, rdmacoll.synchronize).

Handle(parts=None, then=None, value=None): a handle made of others: waiting waits for
`parts` (a Handle, or a list of them) and returns then(result) (then(list of results)
for a list); without parts it is done at once and returns then(value) (or value).)")
      .def(py::init(&Handle::combine), py::arg("parts") = py::none(), py::arg("then") = py::none(),
           py::arg("value") = py::none())
      .def("poll", &Handle::poll, "True once the operation has finished (never blocks)")
      .def("wait", &Handle::wait, "Wait for the operation; returns its result or raises its error")
      .def(
          "add_done_callback",
          [](py::object self, py::object fn) { self.cast<Handle&>().addDoneCallback(self, std::move(fn)); },
          "fn(handle) once the operation is done, from the thread that finished it");
}

}  // namespace rdmacoll
