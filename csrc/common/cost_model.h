// The alpha-beta-gamma cost model: what selection compares. Constants must be identical
// on every rank (rank 0's, broadcast at init): ranks that disagree pick different
// algorithms for the same call (caught by the descriptor hash, but still an error).
//
// An algorithm's predicted time is linear in the constants:
//   T(n, p) = a(n, p) * alpha + b(n, p) * beta + c(n, p) * gamma
// with a = dependent steps, b = bytes a rank moves, c = bytes of reduction input a rank
// reads (see each algorithm's cost function in algorithms/table.cc). The selector
// picks the usable algorithm with the lowest T; ties go to the one listed first.
//
// Defaults, for ranks that each have a core (kDefaultLocal, kDefaultNetwork below): the
// links within a host fitted with `rdmacoll-bench --tune` on the development machine (2
// cores, shared memory, NumPy arrays: 2 ranks gave alpha 0.66 us, beta 2.6e-11 s/B, gamma
// 6e-12 s/B); the network's measured on loopback tcp at 2 ranks on 2 cores. A tuning file
// replaces them (its entries are keyed by backend name, see tuning/policy.h).
//
// Oversubscription: with k = local ranks per CPU above 1 (4 ranks on 2 cores: k = 2), a
// rank gets 1/k of a core, so per-byte work takes k times as long, and a step waits
// for the peer to be scheduled as well: 4 ranks on 2 cores fitted alpha 2.8 us, beta
// 8.4e-11, against 2 ranks' 0.66 us and 2.6e-11. `forRanksPerCpu` scales alpha by k^2
// and beta, gamma by k; the defaults scaled for k = 2 are exactly the constants shipped
// before this rule (4 us, 5e-11, 1.2e-11, tuned at 4 ranks), so the choices at 4 ranks
// on 2 cores are unchanged while 2 ranks get their own, much smaller, step cost.
// Tuning files hold unscaled constants (rdmacoll-bench --tune divides what it fits).
#pragma once

namespace rdmacoll {

struct CostModel {
  double alpha;  // seconds per step (a message's latency, incl. its notification)
  double beta;   // seconds per byte moved between ranks
  double gamma;  // seconds per byte of reduction input

  // The constants where k ranks share each CPU (k <= 1: unchanged).
  CostModel forRanksPerCpu(double k) const {
    if (!(k > 1)) return *this;
    return CostModel{alpha * k * k, beta * k, gamma * k};
  }
};

// Links within a host (peers readable in place) and between hosts.
constexpr CostModel kDefaultLocal{1.0e-6, 2.5e-11, 6.0e-12};
constexpr CostModel kDefaultNetwork{30e-6, 4e-10, 1.2e-11};

}  // namespace rdmacoll
