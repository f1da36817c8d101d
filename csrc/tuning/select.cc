#include "tuning/select.h"

#include "common/error.h"

namespace rdmacoll {
namespace tuning {

using algorithms::AllreduceAlgorithm;

void validateAlgoSetting(const std::string& value) {
  if (value.empty() || algorithms::findAllreduce(value)) return;
  std::string names;
  for (const auto& a : algorithms::allreduceAlgorithms()) names += std::string(names.empty() ? "" : ", ") + a.name;
  throw Error("RDMACOLL_ALGO='" + value + "' names no allreduce algorithm; known: " + names);
}

const AllreduceAlgorithm& selectAllreduce(const Communicator& c, size_t bytes) {
  // A forced algorithm runs wherever it can; elsewhere (eager above its size limit) the
  // default rule applies, so one setting can be used for a whole sweep.
  if (!c.config().algo.empty()) {  // a test/tuning path: the name lookup is fine here
    const AllreduceAlgorithm* forced = algorithms::findAllreduce(c.config().algo);
    if (forced && forced->usable(c, bytes)) return *forced;
  }
  // Default: eager while one step beats 2(p-1) steps (small messages); then direct
  // where every peer's memory is mapped (same host), the ring that reads peer memory
  // where the transport can read it, else the ring through slots.
  static const AllreduceAlgorithm* const order[] = {
      algorithms::findAllreduce("eager"), algorithms::findAllreduce("direct"),
      algorithms::findAllreduce("ring"), algorithms::findAllreduce("ring_slots")};
  for (const AllreduceAlgorithm* a : order) {
    if (a->usable(c, bytes)) return *a;
  }
  return *order[3];
}

}  // namespace tuning
}  // namespace rdmacoll
