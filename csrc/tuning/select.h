// Algorithm selection. For every call: the first RDMACOLL_ALGO rule that covers
// (collective, bytes) names the algorithm, if that algorithm is usable for the call;
// otherwise the cost model of the transport picks the cheapest usable algorithm.
// Inputs are identical on every rank (config is rank 0's, broadcast at init; bytes and
// p are the call's; transport capabilities are the same everywhere), so every rank
// picks the same algorithm.
#pragma once
#include <string>

#include "algorithms/registry.h"
#include "comm/config.h"
#include "tuning/cost_model.h"
#include "tuning/rules.h"

namespace rdmacoll {
namespace tuning {

const algorithms::AllreduceAlgorithm& selectAllreduce(const Communicator& c, size_t bytes);

// The cheapest of the algorithms for which usable(i) is true under model m (registry
// order breaks ties). Pure: exposed so that tests can check the model without ranks.
template <class Usable>
const algorithms::AllreduceAlgorithm* cheapestAllreduce(const CostModel& m, size_t bytes, int p, Usable usable) {
  const algorithms::AllreduceAlgorithm* best = nullptr;
  double bestCost = 0;
  for (const auto& a : algorithms::allreduceAlgorithms()) {
    if (!usable(a)) continue;
    const double cost = a.cost(m, bytes, p);
    if (!best || cost < bestCost) best = &a, bestCost = cost;
  }
  return best;
}

// The algorithm RDMACOLL_ALGO forces for this collective and size, or nullptr when no
// rule covers it. The caller still checks that it is usable for the call (and falls
// back to its default where it is not).
const char* forcedAlgorithm(const Config& config, Collective collective, size_t bytes);

// The cost model of a communicator's links: shared memory's where every peer can be
// read in place (one host), else the network backend's (the slowest links bound an
// algorithm that crosses hosts, or runs over a network backend forced on one host),
// scaled for the ranks per CPU of this host (cost_model.h).
CostModel costModel(const Communicator& c);

// Whether `name` is an algorithm of `collective` (*known: the valid names otherwise).
// Collectives without an algorithm registry yet accept any name.
bool knownAlgorithm(Collective collective, const std::string& name, std::string* known);

// RDMACOLL_ALGO parsed and validated against the registries; throws Error quoting the
// bad part when malformed (called by configFromDict, so init() fails on every rank).
AlgoRules parseAlgoSetting(const std::string& value);
inline void validateAlgoSetting(const std::string& value) { parseAlgoSetting(value); }

// Throws Error when a constant is negative or not finite.
void validateCostModel(const CostModel& m, const std::string& transport);

}  // namespace tuning
}  // namespace rdmacoll
