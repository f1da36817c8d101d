// Timeline: a Chrome trace (JSON, open in Perfetto or chrome://tracing) of every
// operation and its phases, written while the job runs (RDMACOLL_TIMELINE=path.json).
//
// One file per rank: the path with ".rank<r>" before its extension (trace.json ->
// trace.rank0.json, trace.rank1.json, ...), or with "{rank}" replaced where the path has
// it. Every event carries pid = rank and tid = 0, so files of one job concatenate into one
// trace ({"traceEvents": all events}) with one row per rank.
//
// Per operation, one "X" event named after the collective (args: sequence, count, dtype,
// op, name, algorithm, cat "op") spanning its phases, each a nested "X" event (cat
// "phase"), and before it, when it waited for work ahead of it, its queueing:
//   queue      submitted until it started running: an async slice ("b"/"e", cat
//              "queue", id = sequence), since queued operations overlap earlier ones
//   negotiate  waiting for the peers' call headers (descriptors, buffer locations)
//   transfer   moving data and waiting for it: slot/eager messages, credits, progress,
//              the final handshakes
//   reduce     everything else inside the call: reductions (and reads from peer memory
//   / copy     that feed them); "copy" in collectives that do not reduce. Slivers of
//              bookkeeping (< 2 us) between two intervals of one phase are merged.
// Stall warnings appear as instant events.
//
// Cost when off: the Communicator holds no Timeline; every hook is one null test.
// When on: a clock read per phase boundary and a buffered fprintf per event.
//
// Threads: one operation runs at a time per communicator (runtime/async.h), so a
// Timeline is used by one thread at a time; it has no lock.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace rdmacoll {

class Timeline {
 public:
  enum Phase : uint8_t { kIdle, kNegotiate, kTransfer, kReduce, kCopy };

  // Opens this rank's file (truncating it); throws Error when it cannot be written.
  static std::unique_ptr<Timeline> open(const std::string& path, int rank);
  // The file this rank writes for `path`.
  static std::string rankPath(const std::string& path, int rank);
  ~Timeline();  // closes the JSON and the file
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Wall-clock nanoseconds since 2024-01-01 UTC (CLOCK_REALTIME: ranks of one host share
  // it, so their files line up); trace "ts" values are these in microseconds.
  static int64_t nowNs();

  // An operation starts running; queuedNs (0 = not queued) is when it was submitted.
  // argsJson: the inside of the event's "args" object.
  void beginOp(const char* name, bool reduces, uint64_t seq, int64_t queuedNs, const std::string& argsJson);
  void endOp(bool failed);
  // Phase boundaries, from the primitives; nested enter/leave pairs count once.
  void enter(Phase p) {
    if (depth_++ == 0) switchTo(p);
  }
  void leave() {
    if (--depth_ == 0) switchTo(compute_);
  }
  void instant(const char* name, const std::string& text);
  // s as a JSON string literal (quoted, escaped), for argsJson.
  static std::string jsonString(const std::string& s);

  const std::string& path() const { return path_; }

 private:
  Timeline(std::FILE* f, std::string path, int rank);
  void switchTo(Phase p);
  void flushPending();
  void event(const char* name, const char* cat, int64_t startNs, int64_t durNs, const std::string& args);

  std::FILE* f_;
  std::string path_;
  int rank_;
  bool first_ = true;
  // The operation running: its name, start (queued or started), phase and since when.
  const char* opName_ = nullptr;
  std::string opArgs_;
  int64_t opStartNs_ = 0;
  Phase phase_ = kIdle, compute_ = kReduce;
  int64_t phaseSinceNs_ = 0;
  int depth_ = 0;
  // The interval closed last, written once the next one is known (to merge slivers).
  struct Interval {
    Phase phase = kIdle;
    int64_t startNs = 0, endNs = 0;
  } pending_;
};

// A phase of the running operation for the scope's lifetime (no-op without a timeline).
class PhaseScope {
 public:
  PhaseScope(Timeline* t, Timeline::Phase p) : t_(t) {
    if (t_) t_->enter(p);
  }
  ~PhaseScope() {
    if (t_) t_->leave();
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Timeline* t_;
};

}  // namespace rdmacoll
