// Settings every rank must agree on (they shape the protocol). Read from the
// environment on rank 0 and broadcast at init() by bootstrap, so ranks never disagree.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "tuning/cost_model.h"
#include "tuning/rules.h"

namespace rdmacoll {

struct Config {
  size_t segmentBytes = 1 << 20;  // RDMACOLL_SEGMENT_BYTES: pipelining unit of the ring
  size_t slotBytes = 256 << 10;   // RDMACOLL_SLOT_BYTES: one receive slot (ring_slots)
  int slots = 4;                  // RDMACOLL_SLOTS: receive slots per peer
  size_t eagerBytes = 32 << 10;   // RDMACOLL_EAGER_BYTES: largest message of `eager`
  double timeoutSeconds = 600;    // RDMACOLL_TIMEOUT: longest a wait may make no progress
  // Stall inspector (comm/stall.cc): after this long in one wait, the lowest rank that
  // submitted the call logs which ranks have not (and again every as long); 0 = never.
  double stallWarningSeconds = 60;   // RDMACOLL_STALL_WARNING_SECONDS
  double stallShutdownSeconds = 0;   // RDMACOLL_STALL_SHUTDOWN_SECONDS: abort everyone; 0 = never
  // RDMACOLL_TIMELINE: Chrome trace of every operation's phases (runtime/timeline.h);
  // each rank writes its own file (the path with ".rank<r>" before the extension).
  std::string timelinePath;
  std::string algo;               // RDMACOLL_ALGO as written: forced algorithms (tuning/rules.h)
  tuning::AlgoRules algoRules;    // algo parsed (and validated) by configFromDict
  // The cost model of each transport (alpha-beta-gamma, see tuning/cost_model.h): shipped
  // defaults, or rank 0's tuning file (RDMACOLL_TUNING_FILE, rdmacoll-bench --tune).
  tuning::CostModel costShm;
  std::string transport = "auto";  // RDMACOLL_TRANSPORT: auto, shm, tcp, ibverbs
  // The network backend's: loopback tcp here, measured at 2 ranks on 2 cores (one rank
  // per CPU, like costShm's defaults; both are scaled by ranksPerCpu).
  tuning::CostModel costNet{30e-6, 4e-10, 1.2e-11};
  // Not a setting: distinct CPUs the ranks of this host may run on (union of their
  // affinity masks), measured by bootstrap; more local ranks than that = oversubscribed.
  int localCpus = 0;
  // Not a setting: the most local ranks per CPU of any host (>= 1; 4 ranks on 2 cores:
  // 2), from bootstrap, identical on every rank: it scales the cost model
  // (CostModel::forRanksPerCpu), and ranks that scaled differently would choose differently.
  double ranksPerCpu = 1;
  // Not settings either, from bootstrap: the network backend all ranks can use ("tcp", or
  // "ibverbs" where every rank has a usable device), and the host index of every rank.
  std::string netTransport = "tcp";
  std::vector<int> hostOf;
};

}  // namespace rdmacoll
