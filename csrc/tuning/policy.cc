#include "tuning/policy.h"

#include <cmath>

#include "common/error.h"
#include "tuning/select.h"

namespace rdmacoll {
namespace tuning {

void checkCostModel(const CostModel& m, const std::string& where) {
  const struct {
    const char* name;
    double v;
  } constants[] = {{"alpha", m.alpha}, {"beta", m.beta}, {"gamma", m.gamma}};
  for (const auto& k : constants) {
    if (std::isnan(k.v)) continue;
    if (!std::isfinite(k.v) || k.v < 0) {
      throw Error(where + "['" + k.name + "']=" + std::to_string(k.v) +
                  " must be a finite number >= 0 (check RDMACOLL_TUNING_FILE or rerun "
                  "rdmacoll-bench --tune)");
    }
  }
}

Policy Policy::from(const settings::Values& v, std::map<std::string, CostModel> measured) {
  Policy p;
  p.rules = parseAlgoRules(v.text("algo"), &knownAlgorithm);
  for (const auto& kv : measured) checkCostModel(kv.second, "cost_model['" + kv.first + "']");
  p.measured = std::move(measured);
  p.oversubscription = double(v.count("network_oversubscription"));
  p.leafRanks = static_cast<int>(v.count("network_leaf_ranks"));
  return p;
}

namespace {
// A measured entry's constants, the fallback's where it lacks them (NaN).
CostModel filled(const CostModel& t, const CostModel& m) {
  return CostModel{std::isnan(t.alpha) ? m.alpha : t.alpha, std::isnan(t.beta) ? m.beta : t.beta,
                   std::isnan(t.gamma) ? m.gamma : t.gamma};
}
}  // namespace

CostModel Policy::network(const std::vector<std::string>& candidates) const {
  for (const std::string& name : candidates) {
    auto it = measured.find(name);
    if (it != measured.end()) return filled(it->second, kDefaultNetwork);
  }
  return kDefaultNetwork;
}

algorithms::Costs costsFor(const Policy& policy, const Communicator& c) {
  auto model = [&](const std::string& backend, const CostModel& fallback) {
    auto it = policy.measured.find(backend);
    const CostModel m = it != policy.measured.end() ? filled(it->second, fallback) : fallback;
    return m.forRanksPerCpu(c.ranksPerCpu());
  };
  algorithms::Costs k;
  k.local = model(c.localBackend(), kDefaultLocal);
  k.net = model(c.networkBackend(), kDefaultNetwork);
  // An algorithm over all ranks is bound by the slowest links it crosses: shared
  // memory's only where every peer can be read in place (one host).
  k.flat = c.peersReadable() ? k.local : k.net;
  k.oversubscription = policy.oversubscription;
  k.leafRanks = policy.leafRanks;
  return k;
}

}  // namespace tuning
}  // namespace rdmacoll
