// A group of ranks running collectives: a connected Communicator, the selection policy
// and the queue of asynchronous operations. No globals: a process may hold several
// (selector_vs_forced runs one per forced algorithm).
//
// Entry point (run, submit): validate the request, describe it (sequence number,
// descriptor and hash), select the algorithm (tuning/select.h), run it. Synchronous calls
// run on the caller's thread once everything submitted before them has run; an allreduce
// allocates nothing on that path (results come from the pool; up to 64 peers are
// described on the stack), the other collectives a few tables of p entries. An error
// inside an algorithm leaves counters and slots mid-call: the communicator aborts its
// peers and refuses every later call (Communicator::fail).
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/table.h"
#include "comm/communicator.h"
#include "runtime/async.h"
#include "runtime/request.h"
#include "tuning/policy.h"

namespace rdmacoll {

class Group {
 public:
  Group(std::unique_ptr<Communicator> comm, tuning::Policy policy);
  ~Group();  // waits for queued work to finish (the engine may outlive it: handles)
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Setup (bootstrap): the communicator's address, then every rank's.
  transport::Bytes address() const { return comm_->address(); }
  void connect(const std::vector<transport::Bytes>& addresses, const transport::Bytes& secret = {});
  int freeChannel(const std::vector<transport::Bytes>& addresses) const { return comm_->freeChannel(addresses); }
  // A group over `members` (ranks of this group, in the new group's rank order, this
  // rank among them): a sub-communicator on the same connections (Communicator::split),
  // the same policy, and the same executor, so that operations of all the groups of a
  // process run one at a time in the order this rank issued them. Connected like this
  // one: address() gathered among the members, then connect().
  std::unique_ptr<Group> split(const std::vector<int>& members);

  // Runs r on this thread; returns the rows of the result (allgather, alltoall), else 0.
  // A thread that enters while another thread is inside run() on this group, either call
  // unnamed, raises Error, and the call inside raises it too (every peer aborts): two
  // threads' synchronous calls reach the engine in an order that may differ between
  // ranks, which would pair different tensors silently unless names tell them apart.
  size_t run(const Request& r);
  // Validates r now and queues it; `owner` keeps r's memory alive until it has run, and
  // the result's rows go to *rows (allgather, alltoall; may be null).
  AsyncEngine::Handle submit(const Request& r, std::shared_ptr<void> owner, size_t* rows);
  // join (comm/join.cc: Communicator::markJoined, awaitCall), in the engine's turn.
  uint64_t markJoined(uint64_t episode);  // (once this rank's queued work has run)
  bool awaitCall(uint64_t episode, HashedDescriptor* theirs);
  // Handles keep it: waiting on an operation that finished works after the group is gone.
  const std::shared_ptr<AsyncEngine>& engine() const { return engine_; }

  // The table name of what the latest call ran ("direct>ring_slots" after a
  // continuation, "local" at one rank), for benchmarks, tests and logs.
  const char* lastAlgorithm() const { return last_.load(std::memory_order_relaxed); }
  // What selection picks for (collective, bytes) here, without running anything.
  const algorithms::Algorithm& selected(Collective collective, size_t bytes) const;
  Communicator& comm() { return *comm_; }
  // Closes the job's timeline on this rank and opens `path` ("": stop), between
  // operations (the executor's turn: every group of the process shares the timeline).
  void restartTimeline(const std::string& path) {
    engine_->runInline([&] { comm_->restartTimeline(path); });
  }
  const Communicator& comm() const { return *comm_; }

 private:
  Group(std::shared_ptr<AsyncEngine> engine, tuning::Policy policy);
  size_t execute(const Request& r);
  algorithms::Situation situation(Collective collective, size_t bytes) const;
  // The debug log's line for the first call of a (collective, size class) that a.
  void logChoice(const algorithms::Situation& s, const algorithms::Algorithm& a);

  std::unique_ptr<Communicator> comm_;
  tuning::Policy policy_;
  algorithms::Costs costs_{};     // of the connected communicator's links
  algorithms::Situation base_{};  // the job's part of every call's situation
  std::atomic<const char*> last_{""};
  // Synchronous calls inside run() on this group (low 32 bits) and the unnamed ones among
  // them (high 32 bits): run()'s Inside.
  std::atomic<uint64_t> inside_{0};
  // Size classes (bit width of the bytes) whose choice the debug log showed, per
  // collective; touched only by execute(), which runs one call at a time.
  uint64_t logged_[8] = {};
  std::shared_ptr<AsyncEngine> engine_ = std::make_shared<AsyncEngine>();
};

// Throws Error when r is malformed for a group of `size` ranks (bad dtype or op, Average
// on integers, overlapping buffers, a root or splits that do not fit).
void validate(const Request& r, int size);
// Rows of rank r in a reducescatter of `rows` rows over `size` ranks.
size_t reducescatterRows(size_t rows, int size, int rank);

}  // namespace rdmacoll
