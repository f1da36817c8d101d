// Algorithm selection: the one place that chooses. For every call, the first
// RDMACOLL_ALGO rule that covers (collective, bytes) names the algorithm, if it is usable
// for the call; otherwise the usable entry of the collective with the lowest predicted
// cost under the communicator's constants (table order breaks ties). Its inputs are
// identical on every rank (rules and constants are rank 0's, broadcast at init; the
// situation is the call's and the job's), so every rank picks the same algorithm.
#pragma once
#include <string>

#include "algorithms/table.h"
#include "tuning/policy.h"
#include "tuning/rules.h"

namespace rdmacoll {
namespace tuning {

// `usable(a)` stands for a.usable(s) where tests substitute availability (the test hooks
// ask what the model picks among named algorithms); `rules` may be empty.
template <class Usable>
const algorithms::Algorithm* choose(const AlgoRules& rules, const algorithms::Costs& costs,
                                    const algorithms::Situation& s, Usable usable) {
  if (const char* forced = matchRule(rules, s.collective, s.bytes)) {
    const algorithms::Algorithm* a = algorithms::find(s.collective, forced);
    if (a && usable(*a)) return a;  // elsewhere (eager above its size limit) the model chooses
  }
  const algorithms::Algorithm* best = nullptr;
  double bestCost = 0;
  for (const algorithms::Algorithm& a : algorithms::table()) {
    if (a.collective != s.collective || a.continues || !usable(a)) continue;
    const double cost = a.cost(costs, s);
    if (!best || cost < bestCost) best = &a, bestCost = cost;
  }
  return best;
}

// What runs a call in situation s; throws Error when nothing can (no usable entry).
const algorithms::Algorithm& select(const Policy& policy, const algorithms::Costs& costs,
                                    const algorithms::Situation& s);

// Why `chosen` runs a call in situation s, for the debug log: the RDMACOLL_ALGO rule that
// forced it, or the cost model's estimate of every usable candidate (cheapest first).
std::string explain(const Policy& policy, const algorithms::Costs& costs, const algorithms::Situation& s,
                    const algorithms::Algorithm& chosen);

// Whether `name` is a selectable algorithm of `collective` (*known: the valid names
// otherwise): RDMACOLL_ALGO's check.
bool knownAlgorithm(Collective collective, const std::string& name, std::string* known);

}  // namespace tuning
}  // namespace rdmacoll
