#include "python/operation.h"

#include <utility>

#include "common/error.h"

namespace rdmacoll {

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
      if (!py::isinstance<Handle>(p)) throw Error("Handle parts must be Handles");
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

py::object Handle::wait() {
  if (done_) return result_;
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
    if (!op_->error.empty()) throw Error(op_->error);
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
  py::class_<Handle>(m, "Handle", R"(An asynchronous collective in flight (rdmacoll.poll, rdmacoll.synchronize).

Handle(parts=None, then=None, value=None): a handle made of others: waiting waits for
`parts` (a Handle, or a list of them) and returns then(result) (then(list of results)
for a list); without parts it is done at once and returns then(value) (or value).)")
      .def(py::init(&Handle::combine), py::arg("parts") = py::none(), py::arg("then") = py::none(),
           py::arg("value") = py::none())
      .def("poll", &Handle::poll, "True once the operation has finished (never blocks)")
      .def("wait", &Handle::wait, "Wait for the operation; returns its result or raises its error");

}

}  // namespace rdmacoll
