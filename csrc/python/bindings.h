// Pieces of the one Python module, defined in their own files under csrc/python/.
#pragma once
#include <pybind11/pybind11.h>

#include "comm/config.h"

void bindTransportProbe(pybind11::module_& m);  // transport_probe.cc
void bindSchedules(pybind11::module_& m);       // schedule_bindings.cc
void bindTuning(pybind11::module_& m);          // tuning_bindings.cc (rule parser, cost model)
void bindIbverbs(pybind11::module_& m);         // ibverbs_bindings.cc (TRANSPORTS, ibverbs test hooks)
void bindFuzzHooks(pybind11::module_& m);       // fuzz_hooks.cc (tests: hostile peer input)
rdmacoll::Config configFromDict(const pybind11::dict& d);  // config.cc
pybind11::dict configToDict(const rdmacoll::Config& c);    // config.cc
// {"alpha", "beta", "gamma"} <-> CostModel; keys missing from the dict keep `base`'s values.
rdmacoll::tuning::CostModel costModelFromDict(const pybind11::dict& d,
                                              rdmacoll::tuning::CostModel base = {});  // config.cc
pybind11::dict costModelToDict(const rdmacoll::tuning::CostModel& m);                // config.cc
