// _rdmacoll_testing: hooks for rdmacoll's tests, not an API (hooks.h). Built beside _core
// from the same static core, never installed. Errors are raised as _core's own types
// (RdmacollError, RdmacollValueError), so that tests catch them as users would.
#include <pybind11/pybind11.h>

#include <exception>

#include "python/convert.h"
#include "python/testing/hooks.h"

namespace py = pybind11;

PYBIND11_MODULE(_rdmacoll_testing, m) {
  m.doc() = "Hooks for rdmacoll's tests (csrc/python/testing/): not an API, never installed.";

  // Plain pointers, never released: a static py::object would be released after the
  // interpreter is gone.
  py::module_ core = py::module_::import("rdmacoll._core");
  static PyObject* error = py::object(core.attr("RdmacollError")).release().ptr();
  static PyObject* valueError = py::object(core.attr("RdmacollValueError")).release().ptr();
  static PyObject* memoryError = py::object(core.attr("RdmacollMemoryError")).release().ptr();
  py::register_local_exception_translator(
      [](std::exception_ptr p) { translateError(p, error, valueError, memoryError); });

  bindTestingCore(m);
  bindTestingSchedules(m);
  bindTestingTuning(m);
  bindTestingFuzz(m);
  bindTestingTransport(m);
  bindTestingIbverbs(m);
  bindTestingSocketInterfaces(m);
  bindTestingStaging(m);
}
