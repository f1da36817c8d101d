// Pieces of the test hooks' module, _rdmacoll_testing (module.cc puts them together): a
// separate extension that the tests load from the build directory, never installed and so
// never in a wheel (CMakeLists.txt, RDMACOLL_TESTING). It links its own copy of the core,
// so no hook may read state that lives in _core's copy (process-wide registries such as
// the fork guard's: _core.fork_tracked_fds reads that one).
#pragma once
#include <pybind11/pybind11.h>

void bindTestingCore(pybind11::module_& t);              // core.cc: the descriptor hash, HMAC
void bindTestingSchedules(pybind11::module_& t);         // schedules.cc: ring, fold, tree arithmetic
void bindTestingTuning(pybind11::module_& t);            // tuning.cc: rules, cost model, selection
void bindTestingFuzz(pybind11::module_& t);              // fuzz.cc: hostile peer input
void bindTestingTransport(pybind11::module_& t);         // transport_probe.cc: the raw contract
void bindTestingIbverbs(pybind11::module_& t);           // ibverbs.cc: the verbs wire format
void bindTestingSocketInterfaces(pybind11::module_& t);  // socket_interfaces.cc: SOCKET_IFNAME rules
void bindTestingStaging(pybind11::module_& t);           // staging.cc: the GPU staging pipeline, faked
