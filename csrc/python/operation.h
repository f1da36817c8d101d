// One collective operation across the boundary: the Request prepared from Python
// arguments with what it borrows (Prepared), and _core.Handle, the one handle class of
// the Python package (an operation in flight, or handles combined with a function).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "python/arrays.h"
#include "runtime/async.h"
#include "runtime/request.h"

namespace rdmacoll {
namespace py = pybind11;

// Request fields from Python arguments (the bindings of group.cc and device.cc):
// Descriptor::shapeHash from the input's shape less its first `skip` dimensions, or from
// `key` (an int of _core.shape_hash) when given; the name, borrowed from a str for the
// call; an op, one of the ints rdmacoll.Sum ... Product (else ArgumentError).
void setShape(Request& r, py::handle input, py::ssize_t skip, py::handle key);
void setName(Request& r, py::handle name);
ReduceOp opOf(py::handle o);

// What an operation borrows besides the arrays: plain C++ (no Python object), so the
// progress thread may drop it without the GIL.
struct Owned {
  std::string name;
  std::vector<uint64_t> splits, received;
  std::unique_ptr<PoolResult> result;
  size_t rows = 0;  // of the result, filled in by the run
};

enum class Finish : uint8_t { kReady, kRows, kAlltoall };

// A collective ready to run.
struct Prepared {
  Request req;
  std::shared_ptr<Owned> owned;  // null when the request borrows nothing but arrays and a name
  py::object keepIn, keepOut;    // the arrays whose memory the request uses
  py::object ready;              // the result, when known before the run
  Finish finish = Finish::kReady;
  py::dtype dtype;  // kRows, kAlltoall: of the result
  std::vector<py::ssize_t> dims;

  Owned& own() {
    if (!owned) owned = std::make_shared<Owned>();
    return *owned;
  }
  // Before queueing: the name is copied (Python may free the str) and pointers fixed.
  void detach() {
    Owned& o = own();
    if (req.name && o.name.data() != req.name) o.name.assign(req.name, req.nameLen);
    req.name = o.name.empty() ? nullptr : o.name.data();
  }
  // The Python result, once the request has run (rows: of an allgather or alltoall).
  py::object result(size_t rows) const;
};

// The one handle class: an operation in flight (a leaf), or handles combined with a
// function of their results (grouped operations, framework adapters), or a value.
class Handle {
 public:
  Handle() = default;
  // Leaf: a queued operation.
  Handle(std::shared_ptr<AsyncEngine> engine, AsyncEngine::Handle op, Prepared p)
      : engine_(std::move(engine)), op_(std::move(op)), prepared_(std::make_unique<Prepared>(std::move(p))) {}
  // parts: None, a Handle or a list of Handles; then(result): applied to the part's result
  // (a list of them for a list); without parts, to `value`.
  static Handle combine(py::object parts, py::object then, py::object value);
  bool poll();
  // The result (computed once, then kept); raises the operation's error.
  py::object wait();
  // fn(self) once the operation is done, from the thread that finished it (with the GIL;
  // what torch.distributed's futures need).
  void addDoneCallback(py::object self, py::object fn);

 private:
  std::shared_ptr<AsyncEngine> engine_;
  AsyncEngine::Handle op_;
  std::unique_ptr<Prepared> prepared_;
  std::vector<py::object> parts_;
  bool single_ = false;
  py::object then_ = py::none(), value_ = py::none(), result_ = py::none();
  bool done_ = false;
  // The thread computing the result (then_ may release the GIL), none when no one is.
  std::thread::id builder_{};
};

void bindHandle(py::module_& m);

}  // namespace rdmacoll
