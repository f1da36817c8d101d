// Pieces of the one Python module (_core), defined in their own files under csrc/python/:
// module.cc puts them together.
#pragma once
#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <string>

#include "comm/protocol.h"
#include "common/cost_model.h"
#include "common/log.h"
#include "common/settings.h"
#include "common/types.h"
#include "algorithms/table.h"

void bindSettings(pybind11::module_& m);  // settings.cc: SETTINGS, algorithms(), transports
void bindGroup(pybind11::module_& m);     // group.cc: Communicator, Handle
void bindTuning(pybind11::module_& m);    // tuning.cc: the cost model's functions

// _core._testing: hooks for the tests only (testing/*.cc).
void bindTestingCore(pybind11::module_& t);              // testing/core.cc: kernels, descriptor hash, views
void bindTestingSchedules(pybind11::module_& t);         // testing/schedules.cc: ring, fold, tree arithmetic
void bindTestingTuning(pybind11::module_& t);            // testing/tuning.cc: rules, cost model, selection
void bindTestingFuzz(pybind11::module_& t);              // testing/fuzz.cc: hostile peer input
void bindTestingTransport(pybind11::module_& t);         // testing/transport_probe.cc: the raw contract
void bindTestingIbverbs(pybind11::module_& t);           // testing/ibverbs.cc: the verbs wire format
void bindTestingSocketInterfaces(pybind11::module_& t);  // testing/socket_interfaces.cc: SOCKET_IFNAME rules

// log_sink.cc: the core's messages to a Python callable emit(level, line) (level 0 error
// .. 3 debug); None: the core writes them to stderr.
std::shared_ptr<rdmacoll::LogSink> pythonLogSink(pybind11::object emit);

// settings.cc: the dicts the Python package hands over.
rdmacoll::Collective collectiveNamed(const std::string& name);  // throws listing the names
rdmacoll::settings::Values valuesFromDict(const pybind11::dict& d);
rdmacoll::JobLayout layoutFromDict(const pybind11::dict& d);
// {"alpha", "beta", "gamma"}: keys missing from the dict are NaN (not given).
rdmacoll::CostModel costModelFromDict(const pybind11::dict& d);
std::map<std::string, rdmacoll::CostModel> costModelsFromDict(const pybind11::dict& d);
pybind11::dict costModelToDict(const rdmacoll::CostModel& m);

// tuning.cc: a model from {"alpha", "beta", "gamma"}, missing constants the local
// defaults'; a situation of p ranks on one host, every algorithm usable by its shape.
rdmacoll::CostModel fullCostModel(const pybind11::dict& d);
rdmacoll::algorithms::Situation oneHostSituation(rdmacoll::Collective coll, size_t bytes, int p);
