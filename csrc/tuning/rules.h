// RDMACOLL_ALGO: forced algorithms per collective and message size.
//
//   value := item (',' | ';') item ...
//   item  := [collective ':'] [range ':'] algorithm
//   range := size '-' size          bytes in [lo, hi): the upper bound is excluded
//   size  := the settings' size grammar (common/settings.h: 32768, 32K, 32KB, 32KiB,
//            1.5M), or 'inf' as the upper bound
//
// An item without a collective belongs to the collective of the item before it, or to
// allreduce at the start (so a plain `ring` still means: allreduce, every size). Without
// a range an item covers every size. The first item that matches a call wins. Example:
//   allreduce:0-64K:recursive_doubling,64K-inf:ring;allgather:ring
// A forced algorithm runs only where it is usable (eager up to RDMACOLL_EAGER_BYTES);
// elsewhere, and for sizes no item covers, the cost model chooses.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/types.h"

namespace rdmacoll {
namespace tuning {

constexpr size_t kNoLimit = SIZE_MAX;  // 'inf' (settings::kInf)

struct AlgoRule {
  Collective collective = Collective::kAllreduce;
  size_t lo = 0;         // bytes, inclusive
  size_t hi = kNoLimit;  // bytes, exclusive (kNoLimit: no upper bound, inclusive of SIZE_MAX)
  std::string algorithm;
  bool covers(size_t bytes) const { return bytes >= lo && (hi == kNoLimit || bytes < hi); }
};
using AlgoRules = std::vector<AlgoRule>;

// Whether `name` is an algorithm of `collective`; on false, *known lists the valid names.
using AlgorithmCheck = bool (*)(Collective collective, const std::string& name, std::string* known);

// Parses RDMACOLL_ALGO. Throws Error quoting the offending part (and the whole value) when
// it is malformed or names an unknown collective or algorithm. Empty text: no rules.
AlgoRules parseAlgoRules(const std::string& text, AlgorithmCheck check);

// The rule's algorithm for this call, or nullptr when no rule covers it.
const char* matchRule(const AlgoRules& rules, Collective collective, size_t bytes);

// Canonical text of the rules (for messages and tests).
std::string formatAlgoRules(const AlgoRules& rules);

}  // namespace tuning
}  // namespace rdmacoll
