// Test hooks of selection: the RDMACOLL_ALGO parser and hierarchical's cost, without ranks
// (the model's own functions are in python/tuning.cc).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <set>

#include "algorithms/table.h"
#include "common/error.h"
#include "python/convert.h"
#include "python/testing/hooks.h"
#include "runtime/setup.h"
#include "tuning/select.h"

namespace py = pybind11;
using namespace rdmacoll;

void bindTestingTuning(py::module_& m) {
  m.def(
      "protocol_slots",
      [](const py::dict& settings, const py::dict& measured, int ranks) {
        const settings::Values v = valuesFromDict(settings);
        const tuning::Policy policy = tuning::Policy::from(v, costModelsFromDict(measured));
        return protocolFor(v, policy, ranks).slots;
      },
      "The receive slots per peer init() would use for these settings, tuning entries "
      "({backend: {alpha, beta, gamma}}) and ranks (runtime/setup.cc).");
  m.def(
      "parse_algo_rules",
      [](const std::string& text) {
        std::vector<py::tuple> out;
        for (const auto& r : tuning::parseAlgoRules(text, &tuning::knownAlgorithm)) {
          py::object hi = r.hi == tuning::kNoLimit ? py::object(py::none()) : py::object(py::int_(r.hi));
          out.push_back(py::make_tuple(collectiveName(r.collective), r.lo, hi, r.algorithm));
        }
        return out;
      },
      "RDMACOLL_ALGO parsed: [(collective, lo, hi or None for inf, algorithm)]; raises on a bad "
      "value.");
  m.def(
      "forced_algorithm",
      [](const std::string& rules, const std::string& collective, size_t bytes) {
        const char* name = tuning::matchRule(tuning::parseAlgoRules(rules, &tuning::knownAlgorithm),
                                             collectiveNamed(collective), bytes);
        return name ? py::object(py::str(name)) : py::object(py::none());
      },
      "The algorithm RDMACOLL_ALGO's rules force for (collective, bytes), or None.");
  m.def(
      "hierarchical_cost",
      [](const py::dict& local, const py::dict& net, size_t bytes, int perHost, int hosts) {
        const CostModel l = fullCostModel(local), n = fullCostModel(net);
        algorithms::Situation s = situationOf(Collective::kAllreduce, bytes, perHost * hosts);
        s.hosts = hosts;
        s.ranksPerHost = perHost;
        return algorithms::find(Collective::kAllreduce, "hierarchical")->cost(algorithms::Costs{n, l, n}, s);
      },
      "Predicted seconds of hierarchical allreduce: perHost ranks on each of `hosts` hosts.");
}
