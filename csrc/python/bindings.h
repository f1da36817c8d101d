// Pieces of the one Python module (_core), defined in their own files under csrc/python/:
// module.cc puts them together. The dict converters (convert.h) are shared with the test
// hooks' separate module (testing/hooks.h), which is never installed.
#pragma once
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "common/log.h"
#include "python/convert.h"

void bindSettings(pybind11::module_& m);  // settings.cc: SETTINGS, algorithms(), transports
void bindGroup(pybind11::module_& m);     // group.cc: Communicator, Handle
void bindTuning(pybind11::module_& m);    // tuning.cc: the cost model's functions
void bindDevice(pybind11::module_& m);    // device.cc: DeviceCollectives, cuda_runtime()
void bindSchedule(pybind11::module_& m);  // schedule.cc: every rank's steps of a call (csrc/trace/)

// log_sink.cc: the core's messages to a Python callable emit(level, line) (level 0 error
// .. 3 debug); None: the core writes them to stderr.
std::shared_ptr<rdmacoll::LogSink> pythonLogSink(pybind11::object emit);
// With the interpreter held: returns once every line queued by other threads reached emit.
void deliverQueuedLog(const std::shared_ptr<rdmacoll::LogSink>& sink);
