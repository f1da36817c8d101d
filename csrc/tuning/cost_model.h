// The alpha-beta-gamma cost model: what selection compares. Constants must be identical
// on every rank (rank 0's, broadcast at init): ranks that disagree pick different
// algorithms for the same call (caught by the descriptor hash, but still an error).
//
// An algorithm's predicted time is linear in the constants:
//   T(n, p) = a(n, p) * alpha + b(n, p) * beta + c(n, p) * gamma
// with a = dependent steps, b = bytes a rank moves, c = bytes of reduction input a rank
// reads (see each algorithm's cost function in algorithms/registry.cc). The selector
// picks the usable algorithm with the lowest T; ties go to the one registered first.
//
// Defaults: chosen on the development machine (2 cores, shared memory, NumPy arrays) from
// `rdmacoll-bench --tune` tables at 2 and 4 ranks: alpha is a step of 4 ranks on 2 cores
// (the fit gave 3.4 us), beta ~20 GB/s of copying, gamma the local reduction kernel
// (~80 GB/s). They keep eager up to RDMACOLL_EAGER_BYTES at 2 and 4 ranks, then direct
// (recursive_doubling at 2 ranks up to alpha/gamma ~ 330 KB). A tuning file replaces them.
#pragma once

namespace rdmacoll {
namespace tuning {

struct CostModel {
  double alpha = 4.0e-6;    // seconds per step (a message's latency, incl. its notification)
  double beta = 5.0e-11;    // seconds per byte moved between ranks
  double gamma = 1.2e-11;   // seconds per byte of reduction input
};

}  // namespace tuning
}  // namespace rdmacoll
