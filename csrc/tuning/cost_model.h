// The alpha-beta-gamma cost model: what selection compares. Constants must be identical
// on every rank (rank 0's, broadcast at init): ranks that disagree pick different
// algorithms for the same call (caught by the descriptor hash, but still an error).
#pragma once

namespace rdmacoll {
namespace tuning {

struct CostModel {
  double alpha = 1.0e-6;    // seconds per step (a message's latency, incl. its notification)
  double beta = 1.0e-10;    // seconds per byte moved between ranks
  double gamma = 5.0e-11;   // seconds per byte of reduction input
};

}  // namespace tuning
}  // namespace rdmacoll
