// The one Python/C++ boundary, _core: put together from its pieces (bindings.h).
// Constants (dtypes, ops, settings, algorithms) are exported from C++, never restated in
// Python. Test hooks live in the submodule _core._testing.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common/error.h"
#include "common/types.h"
#include "python/arrays.h"
#include "python/bindings.h"

namespace py = pybind11;
using namespace rdmacoll;

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
  m.def("_view", [](py::handle x) { return asArray(x, "input"); },
        "An ndarray view of x without copying (ndarray, DLPack, buffer protocol).");

  bindSettings(m);
  bindGroup(m);
  bindTuning(m);

  py::module_ t = m.def_submodule("_testing", "Hooks for rdmacoll's tests: not an API.");
  bindTestingCore(t);
  bindTestingSchedules(t);
  bindTestingTuning(t);
  bindTestingFuzz(t);
  bindTestingTransport(t);
  bindTestingIbverbs(t);
}
