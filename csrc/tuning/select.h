// Algorithm selection: the default rule, overridden by RDMACOLL_ALGO (a name from the
// registry). Inputs are identical on every rank (config is rank 0's, broadcast at
// init), so every rank picks the same algorithm.
#pragma once
#include "algorithms/registry.h"

namespace rdmacoll {
namespace tuning {

const algorithms::AllreduceAlgorithm& selectAllreduce(const Communicator& c, size_t bytes);
// Throws Error quoting the bad value when RDMACOLL_ALGO names no algorithm.
void validateAlgoSetting(const std::string& value);

}  // namespace tuning
}  // namespace rdmacoll
