#include "tuning/select.h"

#include "algorithms/collectives.h"

#include <cmath>

#include "common/error.h"

namespace rdmacoll {
namespace tuning {

using algorithms::AllreduceAlgorithm;

bool knownAlgorithm(Collective collective, const std::string& name, std::string* known) {
  switch (collective) {
    case Collective::kAllreduce: {
      if (algorithms::findAllreduce(name)) return true;
      if (known) {
        known->clear();
        for (const auto& a : algorithms::allreduceAlgorithms()) {
          *known += std::string(known->empty() ? "" : ", ") + a.name;
        }
      }
      return false;
    }
    default: {
      const std::vector<std::string> names = algorithms::algorithmNames(collective);
      for (const auto& n : names) {
        if (n == name) return true;
      }
      if (known) {
        known->clear();
        for (const auto& n : names) *known += std::string(known->empty() ? "" : ", ") + n;
      }
      return false;
    }
  }
}

AlgoRules parseAlgoSetting(const std::string& value) { return parseAlgoRules(value, &knownAlgorithm); }

void validateCostModel(const CostModel& m, const std::string& transport) {
  const struct { const char* name; double v; } constants[] = {{"alpha", m.alpha}, {"beta", m.beta}, {"gamma", m.gamma}};
  for (const auto& k : constants) {
    if (!std::isfinite(k.v) || k.v < 0) {
      throw Error("cost model of transport '" + transport + "': " + k.name + "=" + std::to_string(k.v) +
                  " must be a finite number >= 0 (check RDMACOLL_TUNING_FILE or rerun rdmacoll-bench --tune)");
    }
  }
}

const char* forcedAlgorithm(const Config& config, Collective collective, size_t bytes) {
  return matchRule(config.algoRules, collective, bytes);
}

CostModel costModel(const Communicator& c) {
  return (c.peersReadable() ? c.config().costShm : c.config().costNet).forRanksPerCpu(c.ranksPerCpu());
}

const AllreduceAlgorithm& selectAllreduce(const Communicator& c, size_t bytes) {
  // A forced algorithm runs wherever it can; elsewhere (eager above its size limit) the
  // model chooses, so one setting can be used for a whole sweep.
  if (const char* name = forcedAlgorithm(c.config(), Collective::kAllreduce, bytes)) {
    const AllreduceAlgorithm* forced = algorithms::findAllreduce(name);  // a test/tuning path
    if (forced && forced->usable(c, bytes)) return *forced;
  }
  static const AllreduceAlgorithm* const hier = algorithms::findAllreduce("hierarchical");
  const bool multiHost = hier->usable(c, bytes);
  const AllreduceAlgorithm* best = cheapestAllreduce(
      costModel(c), bytes, c.size(),
      [&](const AllreduceAlgorithm& a) { return &a != hier && a.usable(c, bytes); });
  if (multiHost) {
    // Across hosts the flat algorithms are bound by the network's constants; hierarchical
    // moves most bytes over shared memory.
    const auto& t = c.topology();
    const double flat = best ? best->cost(costModel(c), bytes, c.size()) : 0;
    const double k = c.ranksPerCpu();
    const double h = algorithms::hierarchicalCost(c.config().costShm.forRanksPerCpu(k),
                                                  c.config().costNet.forRanksPerCpu(k), bytes,
                                                  static_cast<int>(t.local.size()), t.hosts);
    if (!best || h < flat) return *hier;
  }
  if (best) return *best;
  return *algorithms::findAllreduce("ring_slots");  // usable everywhere; not reached
}

}  // namespace tuning
}  // namespace rdmacoll
