// Every algorithm of every collective, one table (docs/design.md: "one table of entries
// {collective, name, description, usable, cost, run}"). The selector (tuning/select.h)
// chooses among the entries of a collective; RDMACOLL_ALGO names them; `rdmacoll-bench
// --list` and rdmacoll.algorithms() print them; the descriptor hash carries the id of the
// entry that runs, so ranks that chose differently get an error, not a hang.
//
// Continuations: an algorithm may learn from the call headers what selection could not see
// (whether a peer passed user memory) and continue as another algorithm. Each such step is
// an entry of its own, named "from>to" and not selectable; the algorithm decides it from
// what every rank received alike, and prim::continueAs makes the descriptor (its hash, the
// slot tags, last_algorithm) name it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "comm/communicator.h"
#include "common/cost_model.h"

namespace rdmacoll {
namespace algorithms {

// What usability and cost see of a call: identical on every rank (the call's collective
// and size and the job's shape and links), so every rank chooses alike.
struct Situation {
  Collective collective = Collective::kAllreduce;
  // The call's bytes as selection sees them (allgather, alltoall: one row from every rank,
  // since ranks contribute different row counts that no rank knows before the headers).
  size_t bytes = 0;
  int ranks = 1;
  int hosts = 1;
  int ranksPerHost = 0;        // ranks on each host where every host runs as many, else 0
  bool peersReadable = false;  // every peer's memory can be read in place (map or cross-memory read)
  bool peersMappable = false;  // ... and mapped (loads and stores straight into it)
  size_t eagerBytes = 0;       // RDMACOLL_EAGER_BYTES
  // A pipeline's unit, min(RDMACOLL_SEGMENT_BYTES, RDMACOLL_SLOT_BYTES): how many segments
  // a pipelined algorithm runs, each a dependent step (the tree's cost). 0: one segment.
  size_t segmentBytes = 0;
  // Where the ring's and the tree's neighbours are (0 where not counted: one host, no leaf
  // size). ringHostHops: ring hops r -> r+1 between two hosts, of p; ringHostLoad: the most
  // of them leaving one host. treeHostEdges: the tree's edges leaving the busiest host
  // (schedule::treeEdgesLeaving); treeLeafEdges: leaving the busiest block of leafRanks
  // consecutive ranks (Costs::leafRanks). The selector's base situation counts them once
  // (countCrossings: O(p)), not every call.
  int ringHostHops = 0, ringHostLoad = 0, treeHostEdges = 0, treeLeafEdges = 0;
  // The tree's one-segment path (schedule::treeCriticalPath(ranks)), counted with the
  // crossings.
  schedule::TreePath treePath;

  static Situation of(const Communicator& c, Collective collective, size_t bytes);
  // hostOf: every rank's host (empty: one host).
  void countCrossings(const std::vector<int>& hostOf, int leafRanks);
};

// The cost model's constants for a communicator's links, scaled for its ranks per CPU:
// `flat` for an algorithm over all ranks (the slowest links it crosses: shared memory's
// where every peer is readable in place, else the network's); `local` and `net` within a
// host and between hosts (hierarchical).
struct Costs {
  CostModel flat, local, net;
  // The network's core: an exchange between ranks leafRanks or more apart (any, for 0)
  // crosses it and gets 1/oversubscription of a link (RDMACOLL_NETWORK_OVERSUBSCRIPTION).
  double oversubscription = 1;
  int leafRanks = 0;
};

struct Algorithm {
  Collective collective;
  const char* name;
  const char* description;
  // Whether it can run this call here (e.g. eager only carries small messages).
  // Continuations: nullptr (never selected).
  bool (*usable)(const Situation&);
  // Predicted seconds, linear in the constants: alpha per dependent step, beta per byte a
  // rank moves, gamma per byte of reduction input it reads. Continuations: nullptr.
  double (*cost)(const Costs&, const Situation&);
  void (*run)(Communicator&, Call&);
  const char* continues = nullptr;  // a continuation: the name of the algorithm it continues
  uint8_t id = 0;                   // 1 + the entry's position (table() numbers them)
};

const std::vector<Algorithm>& table();
const Algorithm& byId(uint8_t id);
// The selectable entry of `collective` named `name`, or nullptr.
const Algorithm* find(Collective collective, const std::string& name);
// The continuation named "from>to" (the algorithms that continue look theirs up once).
const Algorithm& continuation(const char* name);
// The selectable names of a collective, comma-separated (for messages).
std::string names(Collective collective);

}  // namespace algorithms
}  // namespace rdmacoll
