// The cost model's pure functions, for rdmacoll-bench --tune (fitting constants to times)
// and the tests: every algorithm's predicted time, the constants where ranks share CPUs,
// what selection picks among given algorithms (the selector itself: tuning::choose), and
// the reduction kernels alone (gamma; benchmarks/reduce_kernels.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <set>

#include "algorithms/table.h"
#include "common/error.h"
#include "python/bindings.h"
#include "reduce/reduce.h"
#include "tuning/select.h"

namespace py = pybind11;
using namespace rdmacoll;

namespace {
// The constants costsFor (tuning/policy.cc) would hand the algorithms: `model` over all
// ranks on one host; on several, `model` is the network's and `local` (the model where
// None) the links within a host.
algorithms::Costs costsOf(const py::dict& model, int hosts, const py::object& local, double oversubscription,
                          int leafRanks) {
  const CostModel cm = fullCostModel(model);
  const CostModel lm = local.is_none() ? cm : fullCostModel(local.cast<py::dict>());
  algorithms::Costs k = hosts > 1 ? algorithms::Costs{cm, lm, cm} : algorithms::Costs{cm, cm, cm};
  k.oversubscription = oversubscription;
  k.leafRanks = leafRanks;
  return k;
}
}  // namespace

void bindTuning(py::module_& m) {
  m.def(
      "reduce_local",
      [](int dtype, int op, py::array out, std::vector<py::array> inputs, double scale) {
        if (dtype < 0 || dtype >= kNumDataTypes || op < 0 || op >= kNumReduceOps) throw Error("bad dtype/op");
        if (inputs.empty()) throw Error("need at least one input");
        std::vector<const void*> ptrs;
        const size_t n = static_cast<size_t>(out.size());
        const size_t bytes = n * dtypeSize(static_cast<DataType>(dtype));
        if (static_cast<size_t>(out.nbytes()) != bytes) throw Error("out size does not match dtype");
        for (auto& a : inputs) {
          if (static_cast<size_t>(a.nbytes()) != bytes) throw Error("input size mismatch");
          ptrs.push_back(a.data());
        }
        void* dst = out.mutable_data();
        py::gil_scoped_release r;
        reduceN(static_cast<DataType>(dtype), static_cast<ReduceOp>(op), dst, ptrs.data(),
                static_cast<int>(ptrs.size()), n, scale);
      },
      "out = inputs[0] op inputs[1] op ..., then * scale: the kernels, without any transport.");
  m.def(
      "cost_model_for",
      [](const py::dict& model, double ranksPerCpu) {
        return costModelToDict(fullCostModel(model).forRanksPerCpu(ranksPerCpu));
      },
      "The constants a communicator uses where ranks_per_cpu ranks share each CPU.");
  m.def(
      "costs",
      [](const py::dict& model, const std::string& collective, size_t bytes, int p, int hosts, const py::object& local,
         size_t segmentBytes, double oversubscription, int leafRanks) {
        const algorithms::Costs k = costsOf(model, hosts, local, oversubscription, leafRanks);
        const Collective coll = collectiveNamed(collective);
        const algorithms::Situation s = situationOf(coll, bytes, p, hosts, segmentBytes, leafRanks);
        py::dict out;
        for (const algorithms::Algorithm& a : algorithms::table()) {
          if (a.collective == coll && a.cost) out[a.name] = a.cost(k, s);
        }
        return out;
      },
      py::arg("model"), py::arg("collective"), py::arg("bytes"), py::arg("p"), py::arg("hosts") = 1,
      py::arg("local") = py::none(), py::arg("segment_bytes") = 0, py::arg("oversubscription") = 1.0,
      py::arg("leaf_ranks") = 0,
      "Predicted seconds of every algorithm of a collective for (bytes, p) under the model (with hosts > 1: "
      "the network's, and `local` within hosts, as tuning/policy.cc's costsFor; hosts of p / hosts consecutive "
      "ranks where p divides, as a regular job's are numbered; segment_bytes: a pipeline's "
      "unit, 0 for the settings' defaults; oversubscription, leaf_ranks: the network core's, as "
      "RDMACOLL_NETWORK_OVERSUBSCRIPTION and RDMACOLL_NETWORK_LEAF_RANKS).");
  m.def(
      "select",
      [](const py::dict& model, const std::string& collective, size_t bytes, int p,
         const std::vector<std::string>& usable, const std::string& rules, int hosts, const py::object& local,
         double oversubscription, int leafRanks) {
        const std::set<std::string> ok(usable.begin(), usable.end());
        const auto* a = tuning::choose(tuning::parseAlgoRules(rules, &tuning::knownAlgorithm),
                                       costsOf(model, hosts, local, oversubscription, leafRanks),
                                       situationOf(collectiveNamed(collective), bytes, p, hosts, 0, leafRanks),
                                       [&](const algorithms::Algorithm& x) { return ok.count(x.name) > 0; });
        return a ? py::object(py::str(a->name)) : py::object(py::none());
      },
      py::arg("model"), py::arg("collective"), py::arg("bytes"), py::arg("p"), py::arg("usable"), py::arg("rules") = "",
      py::arg("hosts") = 1, py::arg("local") = py::none(), py::arg("oversubscription") = 1.0, py::arg("leaf_ranks") = 0,
      "What selection picks among the algorithms named usable (rules: RDMACOLL_ALGO; the others: as costs).");
}
