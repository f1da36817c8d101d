// Test hooks of selection: the RDMACOLL_ALGO parser and the cost model, without ranks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <set>

#include "algorithms/collectives.h"
#include "algorithms/registry.h"
#include "common/error.h"
#include "python/bindings.h"
#include "tuning/select.h"

namespace py = pybind11;
using namespace rdmacoll;

namespace {

Collective collectiveFromName(const std::string& name) {
  for (Collective c : {Collective::kAllreduce, Collective::kAllgather, Collective::kBroadcast,
                       Collective::kReducescatter, Collective::kAlltoall, Collective::kBarrier}) {
    if (name == collectiveName(c)) return c;
  }
  throw Error("unknown collective '" + name + "'");
}

}  // namespace

void bindTuning(py::module_& m) {
  m.def("_parse_algo_rules", [](const std::string& text) {
    std::vector<py::tuple> out;
    for (const auto& r : tuning::parseAlgoSetting(text)) {
      py::object hi = r.hi == tuning::kNoLimit ? py::object(py::none()) : py::object(py::int_(r.hi));
      out.push_back(py::make_tuple(collectiveName(r.collective), r.lo, hi, r.algorithm));
    }
    return out;
  }, "RDMACOLL_ALGO parsed: [(collective, lo, hi or None for inf, algorithm)]; raises on a bad value.");
  m.def("_default_cost_model", [] { return costModelToDict(tuning::CostModel{}); }, "The shipped (compiled-in) cost model constants.");
  m.def("_cost_model_for", [](const py::dict& model, double ranksPerCpu) {
    return costModelToDict(costModelFromDict(model).forRanksPerCpu(ranksPerCpu));
  }, "The constants a communicator uses where ranks_per_cpu ranks share each CPU.");
  m.def("_allreduce_costs", [](const py::dict& model, size_t bytes, int p) {
    const tuning::CostModel cm = costModelFromDict(model);
    py::dict out;
    for (const auto& a : algorithms::allreduceAlgorithms()) out[a.name] = a.cost(cm, bytes, p);
    return out;
  }, "Predicted seconds of every allreduce algorithm for (bytes, p) under the model.");
  m.def("_collective_costs", [](const py::dict& model, const std::string& collective, size_t bytes, int p) {
    const tuning::CostModel cm = costModelFromDict(model);
    py::dict out;
    auto fill = [&](const auto& all) {
      for (const auto& a : all) out[a.name] = a.cost(cm, bytes, p);
    };
    switch (collectiveFromName(collective)) {
      case Collective::kAllreduce: fill(algorithms::allreduceAlgorithms()); break;
      case Collective::kAllgather: fill(algorithms::allgatherAlgorithms()); break;
      case Collective::kBroadcast: fill(algorithms::broadcastAlgorithms()); break;
      case Collective::kReducescatter: fill(algorithms::reducescatterAlgorithms()); break;
      case Collective::kAlltoall: fill(algorithms::alltoallAlgorithms()); break;
      default: throw Error(collective + " has no algorithms to cost");
    }
    return out;
  }, "Predicted seconds of every algorithm of a collective for (bytes, p) under the model.");
  m.def("_select_allreduce", [](const py::dict& model, size_t bytes, int p, const std::vector<std::string>& usable) {
    const std::set<std::string> ok(usable.begin(), usable.end());
    const auto* a = tuning::cheapestAllreduce(costModelFromDict(model), bytes, p,
                                              [&](const algorithms::AllreduceAlgorithm& x) { return ok.count(x.name) > 0; });
    return a ? py::object(py::str(a->name)) : py::object(py::none());
  }, "The model's choice among the algorithms named usable (as selection makes it).");
  m.def("_forced_algorithm", [](const py::dict& config, const std::string& collective, size_t bytes) {
    const Config c = configFromDict(config);
    const char* name = tuning::forcedAlgorithm(c, collectiveFromName(collective), bytes);
    return name ? py::object(py::str(name)) : py::object(py::none());
  }, "The algorithm RDMACOLL_ALGO (config['algo']) forces for (collective, bytes), or None.");
}
