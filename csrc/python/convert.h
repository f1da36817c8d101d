// Between Python and the core (convert.cc): the dicts the Python package hands over,
// converted, and the core's errors translated. Shared by _core and the test hooks' module
// _rdmacoll_testing (python/testing/), each linking them once.
#pragma once
#include <pybind11/pybind11.h>

#include <cstddef>
#include <exception>
#include <map>
#include <string>

#include "algorithms/table.h"
#include "comm/protocol.h"
#include "common/cost_model.h"
#include "common/settings.h"
#include "common/types.h"

rdmacoll::Collective collectiveNamed(const std::string& name);  // throws listing the names
rdmacoll::settings::Values valuesFromDict(const pybind11::dict& d);
rdmacoll::JobLayout layoutFromDict(const pybind11::dict& d);
// {"alpha", "beta", "gamma"}: keys missing from the dict are NaN (not given).
rdmacoll::CostModel costModelFromDict(const pybind11::dict& d);
std::map<std::string, rdmacoll::CostModel> costModelsFromDict(const pybind11::dict& d);
pybind11::dict costModelToDict(const rdmacoll::CostModel& m);

// A model from {"alpha", "beta", "gamma"}, missing constants the local defaults'; a
// situation of p ranks on `hosts` hosts (p / hosts consecutive ranks on each where that
// divides, as a regular job's are numbered; else irregular, uncounted), every algorithm
// usable by its shape (peers readable in place on one host only), pipelines in segments of
// segmentBytes (0: the settings' defaults), the ring's and tree's crossings counted with
// leaves of leafRanks (RDMACOLL_NETWORK_LEAF_RANKS; Situation::countCrossings).
rdmacoll::CostModel fullCostModel(const pybind11::dict& d);
rdmacoll::algorithms::Situation situationOf(rdmacoll::Collective coll, size_t bytes, int p, int hosts = 1,
                                            size_t segmentBytes = 0, int leafRanks = 0);

// For a pybind11 exception translator: p rethrown, an ArgumentError raised as valueError
// (RdmacollValueError), an OutOfMemory as memoryError (RdmacollMemoryError), any other
// rdmacoll::Error as error (RdmacollError); other exceptions pass on to the next translator.
void translateError(std::exception_ptr p, PyObject* error, PyObject* valueError, PyObject* memoryError);
