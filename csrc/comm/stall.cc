// Stall inspector: a wait that lasts RDMACOLL_STALL_WARNING_SECONDS asks which ranks
// have not started the call it belongs to, and the lowest rank that has started it logs
// them (rank 0 unless rank 0 is among the missing); with RDMACOLL_STALL_SHUTDOWN_SECONDS
// a wait that long with ranks missing aborts every rank (RdmacollError everywhere: the
// waiting ranks at once, the missing ones at their next call).
//
// The same words carry a flag once a rank's communicator is destroyed (shutdown(), or
// exit after an uncaught exception, while MPI_Finalize keeps the process alive): a
// peer waiting for it in a later call aborts at its next check instead of hanging.
//
// Knowing what peers started costs the hot path one local store per call (announce():
// the sequence into my own control region, which same-host peers map), plus, for
// transports that cannot map peer memory, one put64 per peer from a wait that already
// lasted a check period (publishSubmitted). A rank that started call n and has not
// finished it after seconds must be waiting, so it has pushed n by then.
//
// Unless it is stopped inside the call (SIGSTOP, a debugger, a frozen VM): then every
// peer waits for its neighbour in the algorithm, and only the heartbeat tells them apart.
// Every check period of a wait (100 ms, after the first) a rank bumps its `waiting` word
// the same way; a rank that started the call and has not bumped it for a while
// (frozenRanks) is named as the one that stopped, the lowest rank that still waits
// speaks, and the stall shutdown treats it as missing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "common/timeline.h"

namespace rdmacoll {

namespace {
std::string rankList(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}
std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}
}  // namespace

void Communicator::pushOwnWord(size_t at, uint64_t v) {
  for (Peer& p : peers_) {
    if (!p.ep || p.ctrl.mapped) continue;  // a mapping peer reads my own word
    try {
      p.ep->put64(p.ctrl, at, v);
    } catch (const Error&) {
      // A dead peer: the liveness check reports it.
    }
  }
}

void Communicator::publishSubmitted() {
  if (publishedSeq_ == seq_) return;
  publishedSeq_ = seq_;
  pushOwnWord(ctrlLayout_.submitted(rank_), seq_);
}

void Communicator::announceLeaving() {
  const uint64_t v = seq_ | kLeftFlag;
  word(ctrlLayout_.submitted(rank_)).store(v, std::memory_order_release);
  pushOwnWord(ctrlLayout_.submitted(rank_), v);
}

void Communicator::checkPeersLeft(const char* what) {
  for (Peer& p : peers_) {
    if (!p.ep) continue;
    const uint64_t v = submittedBy(p.rank);
    if ((v & kLeftFlag) && (v & ~kLeftFlag) < current_.seq) {
      abortAll(AbortCode::kPeerLeft,
               "rank " + std::to_string(p.rank) + " shut down (rdmacoll.shutdown() or process exit) after call #" +
                   std::to_string(v & ~kLeftFlag) + "; it will never join " + describeCall(current_) +
                   ", for which rank " + std::to_string(rank_) + " was waiting (" + what + ")");
    }
  }
}

// A counter rank r keeps in its own words (offset `at` of its PeerWords): pushed into
// mine, or read in its region where I map it.
uint64_t Communicator::ownWordOf(int r, size_t at) const {
  uint64_t pushed = word(at).load(std::memory_order_relaxed);
  const Peer& p = peers_[r];
  if (p.ctrl.mapped) {
    auto* w = reinterpret_cast<const std::atomic<uint64_t>*>(static_cast<const char*>(p.ctrl.mapped) + at);
    pushed = std::max(pushed, w->load(std::memory_order_relaxed));
  }
  return pushed;
}

uint64_t Communicator::submittedBy(int r) const {
  if (r == rank_) return seq_;
  return ownWordOf(r, ctrlLayout_.submitted(r));
}

void Communicator::beat() {
  lastBeat_ = std::chrono::steady_clock::now();
  ++beats_;
  word(ctrlLayout_.waiting(rank_)).store(beats_, std::memory_order_relaxed);
  pushOwnWord(ctrlLayout_.waiting(rank_), beats_);
  const auto now = lastBeat_;
  if (beatSeen_.size() != static_cast<size_t>(size_)) {
    beatSeen_.assign(size_, ~uint64_t(0));
    beatSince_.assign(size_, now);
  }
  for (int r = 0; r < size_; ++r) {
    const uint64_t v = r == rank_ ? beats_ : ownWordOf(r, ctrlLayout_.waiting(r));
    if (v != beatSeen_[r]) {
      beatSeen_[r] = v;
      beatSince_[r] = now;
    }
  }
}

std::vector<int> Communicator::frozenRanks(double waited) const {
  std::vector<int> frozen;
  if (beatSince_.empty()) return frozen;
  // Silent for half of this wait (counted within it), at least kFrozenSeconds: a rank
  // that waits beats ten times a second, even through many short waits; one computing
  // inside a call (a reduction, a copy) does so for milliseconds between waits.
  const double quiet = std::max(kFrozenSeconds, waited / 2);
  const auto now = std::chrono::steady_clock::now();
  const auto waitStart =
      now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(waited));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || (submittedBy(r) & ~kLeftFlag) < current_.seq) continue;
    const auto since = std::max(beatSince_[r], waitStart);
    if (std::chrono::duration<double>(now - since).count() >= quiet) frozen.push_back(r);
  }
  return frozen;
}

std::string Communicator::frozenText(const std::vector<int>& frozen) const {
  if (frozen.empty()) return {};
  const auto now = std::chrono::steady_clock::now();
  double quiet = 1e300;  // (the shortest silence among them, as far as this rank knows)
  for (int r : frozen) quiet = std::min(quiet, std::chrono::duration<double>(now - beatSince_[r]).count());
  return "ranks " + rankList(frozen) + " started it but have not waited in it for the last " + seconds(quiet) +
         " (stopped: SIGSTOP, a debugger; or busy outside rdmacoll since finishing their part)";
}

void Communicator::inspectStall(double waited, const char* what, int waitingFor, bool warn) {
  const uint64_t seq = current_.seq;
  std::vector<int> started, missing;
  for (int r = 0; r < size_; ++r) ((submittedBy(r) & ~kLeftFlag) >= seq ? started : missing).push_back(r);
  const std::vector<int> frozen = frozenRanks(waited);
  const bool shutdown = protocol_.stallShutdownSeconds > 0 && waited >= protocol_.stallShutdownSeconds &&
                        (!missing.empty() || !frozen.empty());
  // One rank speaks for the job: the lowest that started the call and still waits (every
  // waiting rank aborts on shutdown, the first to get there wins).
  int speaker = rank_;
  for (int r : started) {
    if (std::find(frozen.begin(), frozen.end(), r) == frozen.end()) {
      speaker = r;
      break;
    }
  }
  if (!shutdown && (!warn || speaker != rank_)) return;
  std::string msg = "call " + describeCall(current_) + " was started by ranks " + rankList(started);
  if (missing.empty()) {
    msg += " (all) but has not finished";
  } else {
    msg += "; ranks " + rankList(missing) + " have not started it";
  }
  if (!frozen.empty()) msg += "; " + frozenText(frozen);
  msg += ": rank " + std::to_string(rank_) + " has waited " + seconds(waited) + " for " + what +
         (waitingFor >= 0 ? " from rank " + std::to_string(waitingFor) : std::string());
  if (shutdown) {
    abortAll(AbortCode::kStall, "rdmacoll stall: " + msg + " (RDMACOLL_STALL_SHUTDOWN_SECONDS=" +
                                    seconds(protocol_.stallShutdownSeconds) + ")");
  }
  log_->write(LogLevel::kWarning, "stall warning: " + msg + " (RDMACOLL_STALL_WARNING_SECONDS=" +
                                      seconds(protocol_.stallWarningSeconds) + ")");
  if (Timeline* t = timeline()) t->instant("stall", msg);
}

void Communicator::WaitState::checkStall(double waited) {
  Communicator& c = c_;
  c.publishSubmitted();
  c.beat();
  c.checkPeersLeft(what_);
  const Protocol& cfg = c.protocol_;
  const bool warn = cfg.stallWarningSeconds > 0 && waited >= cfg.stallWarningSeconds && waited >= nextStallReport_;
  const bool shut = cfg.stallShutdownSeconds > 0 && waited >= cfg.stallShutdownSeconds;
  if (!warn && !shut) return;
  if (warn) nextStallReport_ = waited + cfg.stallWarningSeconds;
  c.inspectStall(waited, what_, peer_, warn);
}

}  // namespace rdmacoll
