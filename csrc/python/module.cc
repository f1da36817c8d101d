// The one Python/C++ boundary, _core: put together from its pieces (bindings.h).
// Constants (dtypes, ops, settings, algorithms) are exported from C++, never restated in
// Python. Test hooks are a separate module, _rdmacoll_testing (testing/hooks.h), never
// installed.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "common/error.h"
#include "common/fork_guard.h"
#include "common/types.h"
#include "python/arrays.h"
#include "python/bindings.h"
#include "common/stream_copy.h"

namespace py = pybind11;
using namespace rdmacoll;

PYBIND11_MODULE(_core, m) {
  m.doc() = "rdmacoll core (C++): communicator, transports, algorithms";

  static py::exception<Error> exc(m, "RdmacollError", PyExc_RuntimeError);
  // An argument error found before communicating: both RdmacollError and ValueError, so
  // that Horovod users' `except ValueError` keeps working.
  // (A plain pointer, never released: a static py::object would be released after the
  // interpreter is gone.)
  static PyObject* valueExc =
      PyErr_NewExceptionWithDoc("rdmacoll._core.RdmacollValueError",
                                "An invalid argument, found before communicating (an RdmacollError and a ValueError).",
                                py::make_tuple(exc, py::handle(PyExc_ValueError)).ptr(), nullptr);
  if (!valueExc) throw py::error_already_set();
  m.attr("RdmacollValueError") = py::handle(valueExc);
  // Memory the machine cannot give, found before faulting it in: also a MemoryError.
  static PyObject* memoryExc = PyErr_NewExceptionWithDoc(
      "rdmacoll._core.RdmacollMemoryError",
      "More memory than the machine or its limits give, found before any was faulted in (an RdmacollError and a "
      "MemoryError).",
      py::make_tuple(exc, py::handle(PyExc_MemoryError)).ptr(), nullptr);
  if (!memoryExc) throw py::error_already_set();
  m.attr("RdmacollMemoryError") = py::handle(memoryExc);
  py::register_exception_translator([](std::exception_ptr p) { translateError(p, exc.ptr(), valueExc, memoryExc); });

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
  m.def(
      "_view", [](py::handle x) { return asArray(x, "input"); },
      "An ndarray view of x without copying (ndarray, DLPack, buffer protocol).");

  m.def(
      "stream_copy",
      [](py::handle dst, py::handle src, bool always) {
        py::array in = contiguousInput(src, "src");
        py::array out = asArray(dst, "dst");
        checkOut(in, out);
        const size_t bytes = static_cast<size_t>(in.nbytes());
        void* d = out.mutable_data();
        const void* s = in.data();
        const char *dc = static_cast<const char*>(d), *sc = static_cast<const char*>(s);
        py::gil_scoped_release nogil;
        if (dc < sc + bytes && sc < dc + bytes) {
          std::memmove(d, s, bytes);  // overlapping views of one buffer
        } else if (always) {
          streamStore(d, s, bytes);
        } else {
          streamCopy(d, s, bytes);
        }
      },
      py::arg("dst"), py::arg("src"), py::arg("always") = false,
      "dst[...] = src for contiguous arrays of one shape and dtype, with non-temporal stores "
      "from 1 MiB on (always=True: at every size; common/stream_copy.h): for data the next "
      "reader will not find in cache.");
  m.attr("STREAM_COPY_MIN_BYTES") = kStreamCopyMinBytes;

  bindSettings(m);
  bindGroup(m);
  bindTuning(m);
  bindDevice(m);
  bindSchedule(m);
  m.def("fork_tracked_fds", &forkguard::trackedCount,
        "Descriptors the core holds now: the ones a forked child closes (common/fork_guard.h). "
        "Introspection for tests: the registry is process state of this module's core.");
}
