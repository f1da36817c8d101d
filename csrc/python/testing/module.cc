// _rdmacoll_testing: hooks for rdmacoll's tests, not an API (hooks.h). Built beside _core
// from the same static core, never installed. Errors are raised as _core's own types
// (RdmacollError, RdmacollValueError), so that tests catch them as users would.
#include <pybind11/pybind11.h>

#include <exception>

#include "common/error.h"
#include "python/testing/hooks.h"

namespace py = pybind11;
using namespace rdmacoll;

PYBIND11_MODULE(_rdmacoll_testing, m) {
  m.doc() = "Hooks for rdmacoll's tests (csrc/python/testing/): not an API, never installed.";

  // Plain pointers, never released: a static py::object would be released after the
  // interpreter is gone.
  py::module_ core = py::module_::import("rdmacoll._core");
  static PyObject* error = core.attr("RdmacollError").release().ptr();
  static PyObject* valueError = core.attr("RdmacollValueError").release().ptr();
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ArgumentError& e) {
      PyErr_SetString(valueError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(error, e.what());
    }
  });

  bindTestingCore(m);
  bindTestingSchedules(m);
  bindTestingTuning(m);
  bindTestingFuzz(m);
  bindTestingTransport(m);
  bindTestingIbverbs(m);
  bindTestingSocketInterfaces(m);
}
