// What comm/ needs from the settings (common/settings.h), and where the ranks run.
//
// Protocol: the settings that shape what ranks send each other (slot and segment sizes,
// the eager inbox) and how long they wait. Identical on every rank: rank 0's values,
// broadcast at init() (ranks that disagreed would misread each other's messages).
//
// JobLayout: what bootstrap learned about the ranks, identical on every rank.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/cost_model.h"
#include "common/settings.h"

namespace rdmacoll {

// RDMACOLL_SLOTS=0 (the default): the slots per peer follow the network's bandwidth-delay
// product. A sender keeps messages in flight to a peer, and a slot's credit comes back a
// round trip (2 alpha) after its message left, so a link of 1/beta bytes per second stays
// busy with ceil(2 alpha / beta / slotBytes) messages in flight, plus the one the
// receiver is reducing from. Twice that many slots: pairwise exchanges send half the
// slots ahead (comm/pairwise.cc: the credits for them come back behind the peer's own
// half, in order on the same connection). At least kMinAutoSlots (what the pipelines were measured
// with, within a host and across), at most the setting's own 64, and above the minimum
// no more than keep the slot memory for `size` peers within kAutoSlotMemory (per rank:
// a host of 64 ranks then holds at most 16 GiB of slots, as 4 slots of 1 MiB would).
// Constants that say nothing of the link (a beta or alpha of 0, which a tuning fit gives
// where its data cannot support one) keep the minimum.
constexpr int kMinAutoSlots = 4;
constexpr int kMaxAutoSlots = 64;
constexpr double kAutoSlotMemory = double(256u << 20);
inline int slotsForNetwork(const CostModel& net, size_t slotBytes, int size) {
  if (!(net.alpha > 0 && net.beta > 0 && std::isfinite(net.alpha) && std::isfinite(net.beta))) return kMinAutoSlots;
  const double bdp = 2 * net.alpha / net.beta;
  const double budget = std::floor(kAutoSlotMemory / (double(std::max<size_t>(slotBytes, 1)) * std::max(size, 1)));
  const double want = std::min({2 * (std::ceil(bdp / double(std::max<size_t>(slotBytes, 1))) + 1),
                                double(kMaxAutoSlots), std::max(budget, double(kMinAutoSlots))});
  return std::max(kMinAutoSlots, static_cast<int>(want));
}

struct Protocol {
  size_t segmentBytes;    // RDMACOLL_SEGMENT_BYTES: pipelining unit of rings and trees
  size_t slotBytes;       // RDMACOLL_SLOT_BYTES: one receive slot
  int slots;              // RDMACOLL_SLOTS: receive slots per peer (0 there: slotsForNetwork's)
  size_t eagerBytes;      // RDMACOLL_EAGER_BYTES: largest message of `eager`
  double timeoutSeconds;  // RDMACOLL_TIMEOUT: longest a wait may make no progress
  // Stall inspector (comm/stall.cc): after this long in one wait, the lowest rank that
  // submitted the call logs which ranks have not (and again every as long); 0 = never.
  double stallWarningSeconds;   // RDMACOLL_STALL_WARNING_SECONDS
  double stallShutdownSeconds;  // RDMACOLL_STALL_SHUTDOWN_SECONDS: abort everyone; 0 = never
  // RDMACOLL_TIMELINE: Chrome trace of every operation's phases (common/timeline.h); each
  // rank writes its own file (the path with ".rank<r>" before the extension).
  std::string timelinePath;
  // RDMACOLL_POOL_FREE_BYTES: free pool memory kept faulted in for reuse (comm/pool.h).
  size_t poolFreeBytes;

  // network: the constants of the links between hosts (slotsForNetwork), size: the ranks.
  static Protocol from(const settings::Values& v, const CostModel& network = kDefaultNetwork, int size = 1) {
    Protocol p;
    p.segmentBytes = v.bytes("segment_bytes");
    p.slotBytes = v.bytes("slot_bytes");
    const int slots = static_cast<int>(v.count("slots"));
    p.slots = slots > 0 ? slots : slotsForNetwork(network, p.slotBytes, size);
    p.eagerBytes = v.bytes("eager_bytes");
    p.timeoutSeconds = v.seconds("timeout");
    p.stallWarningSeconds = v.seconds("stall_warning");
    p.stallShutdownSeconds = v.seconds("stall_shutdown");
    p.timelinePath = v.text("timeline");
    p.poolFreeBytes = v.bytes("pool_free_bytes");
    return p;
  }

  // The one segment size: the bytes a pipeline moves or reduces at a time, the largest
  // multiple of `unit` (an element) within RDMACOLL_SEGMENT_BYTES and `cap` (a slot, for
  // messages through slots), at least one unit. Staging segments hold segmentBytes.
  size_t segment(size_t unit, size_t cap = SIZE_MAX) const {
    const size_t most = std::min(segmentBytes, cap);
    return unit == 0 ? most : std::max(unit, most / unit * unit);
  }
  size_t slotSegment(size_t unit) const { return segment(unit, slotBytes); }
};

struct JobLayout {
  std::vector<int> hostOf;  // host index of every rank, hosts numbered by first rank (empty: one host)
  // Distinct CPUs the ranks of this host may run on (the union of their affinity masks):
  // more local ranks than that = oversubscribed. 0: unknown.
  int localCpus = 0;
  // The most local ranks per CPU of any host (>= 1; 4 ranks on 2 cores: 2): the cost
  // model's scale, identical on every rank.
  double ranksPerCpu = 1;
  // Every rank's transport::networkOffer() (empty on one host): the transport layer
  // chooses the network backend from these.
  std::vector<std::string> networkOffers;
};

}  // namespace rdmacoll
