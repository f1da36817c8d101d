// The schedules as data (csrc/trace/, trace/schedule.h): every rank's steps of one
// allreduce as the algorithm table's own code makes them, for the simulator's driver
// (benchmarks/scale/) and the tests that count a real run's bytes against them.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <exception>

#include "comm/protocol.h"
#include "common/error.h"
#include "python/bindings.h"
#include "trace/schedule.h"

namespace py = pybind11;
using namespace rdmacoll;

void bindSchedule(py::module_& m) {
  m.def(
      "schedule",
      [](const std::string& algorithm, int ranks, uint64_t count, int dtype, std::vector<int> hosts, bool readable,
         bool mappable, bool inPlace, const py::dict& settings) {
        if (dtype < 0 || dtype >= kNumDataTypes) throw Error("bad dtype");
        if (ranks < 1) throw Error("ranks must be at least 1");
        const Protocol protocol = Protocol::from(valuesFromDict(settings));
        rdmacoll_trace::Request req;
        req.algorithm = algorithm;
        req.ranks = ranks;
        req.count = count;
        req.dtype = dtype;
        req.hostOf = std::move(hosts);
        req.readable = readable;
        req.mappable = mappable;
        req.inPlace = inPlace;
        req.segmentBytes = protocol.segmentBytes;
        req.slotBytes = protocol.slotBytes;
        req.slots = protocol.slots;
        req.eagerBytes = protocol.eagerBytes;
        py::list out;
        for (int r = 0; r < ranks; ++r) {
          std::vector<rdmacoll_trace::Step> steps;
          try {
            steps = rdmacoll_trace::stepsOf(req, r);
          } catch (const std::exception& e) {  // the traced core's errors are rdmacoll_trace's types
            throw Error(e.what());
          }
          py::array_t<int64_t> a({static_cast<py::ssize_t>(steps.size()), static_cast<py::ssize_t>(4)});
          auto v = a.mutable_unchecked<2>();
          for (size_t i = 0; i < steps.size(); ++i) {
            v(i, 0) = static_cast<int64_t>(steps[i].op);
            v(i, 1) = static_cast<int64_t>(steps[i].flow);
            v(i, 2) = steps[i].peer;
            v(i, 3) = static_cast<int64_t>(steps[i].value);
          }
          out.append(a);
        }
        return out;
      },
      py::arg("algorithm"), py::arg("ranks"), py::arg("count"), py::arg("dtype"), py::arg("hosts") = std::vector<int>{},
      py::arg("readable") = false, py::arg("mappable") = false, py::arg("in_place") = false,
      py::arg("settings") = py::dict(),
      "Every rank's steps of one allreduce of `count` elements under `algorithm`, recorded by running the "
      "algorithm's own code with nothing moved: per rank an int64 array of rows (op, flow, peer, value); "
      "op and flow codes in SCHEDULE_OPS and SCHEDULE_FLOWS (trace/schedule.h defines them). hosts: the host "
      "of every rank; settings: the job's settings (segment_bytes, slot_bytes, slots, eager_bytes).");
  py::list ops, flows;
  for (int i = 0; i <= static_cast<int>(rdmacoll_trace::Op::kCopy); ++i) {
    ops.append(rdmacoll_trace::opName(static_cast<rdmacoll_trace::Op>(i)));
  }
  for (int i = 0; i < rdmacoll_trace::kFlows; ++i) {
    flows.append(rdmacoll_trace::flowName(static_cast<rdmacoll_trace::Flow>(i)));
  }
  m.attr("SCHEDULE_OPS") = ops;
  m.attr("SCHEDULE_FLOWS") = flows;
  m.attr("SCHEDULE_HEADER_BYTES") = rdmacoll_trace::headerBytes();
}
