#include "tuning/select.h"

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

bool knownAlgorithm(Collective collective, const std::string& name, std::string* known) {
  if (algorithms::find(collective, name)) return true;
  if (known) *known = algorithms::names(collective);
  return false;
}

}  // namespace tuning
}  // namespace rdmacoll
