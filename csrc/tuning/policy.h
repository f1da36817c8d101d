// What selection reads from the settings (common/settings.h): RDMACOLL_ALGO's rules and
// the cost model's constants. Identical on every rank: rank 0's settings and tuning file,
// broadcast at init() (ranks that disagreed would choose different algorithms).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "algorithms/table.h"
#include "common/cost_model.h"
#include "common/settings.h"
#include "tuning/rules.h"

namespace rdmacoll {
namespace tuning {

struct Policy {
  AlgoRules rules;  // RDMACOLL_ALGO, parsed and checked against the algorithm table
  // Constants measured by `rdmacoll-bench --tune`, unscaled (one rank per CPU), keyed by
  // the backend they were measured on (Device::localBackend / networkBackend names);
  // links without an entry, and constants an entry lacks (NaN), keep kDefaultLocal /
  // kDefaultNetwork's.
  std::map<std::string, CostModel> measured;
  // The network's core (RDMACOLL_NETWORK_OVERSUBSCRIPTION, RDMACOLL_NETWORK_LEAF_RANKS):
  // algorithms::Costs carries them to the cost functions.
  double oversubscription = 1;
  int leafRanks = 0;

  // The network's constants before a transport is chosen (for the slot depth,
  // comm/protocol.h): the measured ones of the first of `candidates` (backends, best
  // first: transport::networkCandidates) that has an entry; constants it lacks, and no
  // entry at all, kDefaultNetwork's.
  CostModel network(const std::vector<std::string>& candidates) const;

  // Throws Error quoting the bad part of RDMACOLL_ALGO, or naming a bad constant.
  static Policy from(const settings::Values& v, std::map<std::string, CostModel> measured);
};

// Throws Error unless every constant is finite and >= 0 (or NaN: not given); `where`
// names its source, e.g. "cost_model['shm']".
void checkCostModel(const CostModel& m, const std::string& where);

// The constants for a communicator's links (algorithms/table.h: Costs), scaled for its
// ranks per CPU (cost_model.h).
algorithms::Costs costsFor(const Policy& policy, const Communicator& c);

}  // namespace tuning
}  // namespace rdmacoll
