#include "tuning/select.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "common/error.h"

namespace rdmacoll {
namespace tuning {

const algorithms::Algorithm& select(const Policy& policy, const algorithms::Costs& costs,
                                    const algorithms::Situation& s) {
  const algorithms::Algorithm* a =
      choose(policy.rules, costs, s, [&](const algorithms::Algorithm& x) { return x.usable(s); });
  if (!a) throw Error(std::string(collectiveName(s.collective)) + ": no algorithm can run here");
  return *a;
}

std::string explain(const Policy& policy, const algorithms::Costs& costs, const algorithms::Situation& s,
                    const algorithms::Algorithm& chosen) {
  const char* forced = matchRule(policy.rules, s.collective, s.bytes);
  if (forced && chosen.name == std::string(forced)) return "forced by RDMACOLL_ALGO";
  std::vector<std::pair<double, const char*>> estimates;
  for (const algorithms::Algorithm& a : algorithms::table()) {
    if (a.collective == s.collective && !a.continues && a.usable(s)) estimates.emplace_back(a.cost(costs, s), a.name);
  }
  std::stable_sort(estimates.begin(), estimates.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::string out = forced ? std::string("RDMACOLL_ALGO names ") + forced + ", which cannot run here; " : "";
  out += "cost model estimates";
  for (const auto& e : estimates) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %s %.1f us,", e.second, e.first * 1e6);
    out += buf;
  }
  out.pop_back();
  return out;
}

bool knownAlgorithm(Collective collective, const std::string& name, std::string* known) {
  if (algorithms::find(collective, name)) return true;
  if (known) *known = algorithms::names(collective);
  return false;
}

}  // namespace tuning
}  // namespace rdmacoll
