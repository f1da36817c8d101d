// How ranks wait (docs/design.md, "Progress and waiting").
//
// Not oversubscribed (local ranks <= cores in our CPU mask): spin with `pause` for
// kSpinMicros, then sched_yield until the device's pollMicros(), then sleep on it (futex for
// shm; a sender wakes us only when we flagged ourselves asleep). Oversubscribed: a
// waiter holds a core some peer needs, so yield at once and sleep after
// kOversubscribedYieldMicros (spinning with 4 ranks on 2 cores costs milliseconds;
// yielding alone does not hand the core to a peer queued on the other CPU).
// Contended (a sched_yield that returned kContendedYieldMicros or more later: another
// process ran on this core, a compute thread or a neighbour's job): waits are patient as
// when oversubscribed, for kContendedMillis after the last such yield. A waiter that keeps
// yielding hands its core to that process for a time slice at each yield, while a
// sleeper's wake-up preempts it (benchmarks/allreduce_vs_mpi.py, 2 ranks on 2 cores with
// a busy loop beside them: 16 MiB in place on NumPy arrays 6.6-6.9 ms before, 3.1-3.6 ms
// after; MPI's 5.9-7.5 ms in the same launches).
// The interpreter lock is released before sleeping. Every step: the abort word and another
// thread's report (Communicator::poison). Every kCheckMillis: every peer's liveness, the
// timeout, stalls (comm/stall.cc), and pending signals (Ctrl-C aborts the peers, then
// raises Interrupted so that the binding re-raises KeyboardInterrupt). Before the first of
// those, the peers' liveness alone, kFirstCheckMillis into the wait and again at twice
// that, and so on: a peer that died is seen within milliseconds of a wait on it, not a
// check period later (an elastic job's recovery, 160 ms from a kill to the next step,
// spent 100 ms here). Again, not only once: where a dead process's pidfd turns readable
// only when its parent reaps it (gVisor), the parent's next look comes a few ms later.
#include <sched.h>

#include <algorithm>

#include <string>
#include <utility>

#include "comm/communicator.h"
#include "common/error.h"
#include "common/thread_role.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RC_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define RC_PAUSE() asm volatile("yield")
#else
#define RC_PAUSE() \
  do {             \
  } while (0)
#endif

namespace rdmacoll {

namespace {
constexpr int kSpinMicros = 50;
constexpr int kOversubscribedYieldMicros = 30;
constexpr int kContendedYieldMicros = 500;
constexpr int kContendedMillis = 1000;
constexpr int kFirstCheckMillis = 5;
constexpr int kCheckMillis = 100;
}  // namespace

Communicator::WaitState::WaitState(Communicator& c, int peer, const char* what)
    : c_(c),
      peer_(peer),
      what_(what),
      start_(std::chrono::steady_clock::now()),
      now_(start_),
      nextCheck_(start_ + std::chrono::milliseconds(kFirstCheckMillis)),
      earlyMillis_(kFirstCheckMillis),
      patient_(c.oversubscribed_ || threadRole().patient() || start_ < c.contendedUntil_) {
  // The heartbeat goes on through short waits too (comm/stall.cc): a rank that progresses
  // by many waits of less than a check period is not silent.
  if (start_ - c.lastBeat_ >= kBeatPeriod) c.beat();
}

Communicator::WaitState::~WaitState() {
  if (released_) c_.hooks_->acquireInterpreter(interpreter_);
}

bool Communicator::WaitState::step() {
  ++iter_;
  c_.checkAbortWord();
  c_.checkPoison();
  if ((iter_ & 63) == 0 || patient_ || released_) now_ = std::chrono::steady_clock::now();
  auto now = now_;
  if (now >= nextCheck_) {
    if (earlyMillis_ < kCheckMillis) {
      checkLiveness();
      earlyMillis_ *= 2;
      nextCheck_ = start_ + std::chrono::milliseconds(std::min(earlyMillis_, kCheckMillis));
    } else {
      periodicChecks();
      nextCheck_ = now + std::chrono::milliseconds(kCheckMillis);
    }
  }
  auto waited = std::chrono::duration_cast<std::chrono::microseconds>(now - start_).count();
  if (!patient_ && waited < kSpinMicros) {
    for (int i = 0; i < 16; ++i) RC_PAUSE();
    return false;
  }
  if (waited < (patient_ ? kOversubscribedYieldMicros : c_.pollMicros_)) {
    const auto before = std::chrono::steady_clock::now();
    sched_yield();
    const auto after = std::chrono::steady_clock::now();
    if (after - before >= std::chrono::microseconds(kContendedYieldMicros)) {
      c_.contendedUntil_ = after + std::chrono::milliseconds(kContendedMillis);
      patient_ = true;
    }
    now_ = after;
    return false;
  }
  if (!released_) {
    interpreter_ = c_.hooks_->releaseInterpreter();
    released_ = true;
  }
  // Announce the sleep; the caller re-checks its condition, then sleeps. Announcing
  // before the final checks means an event after them (a peer's put64, an abort) wakes us.
  seen_ = c_.links_->device().prepareSleep();
  if (c_.abortEndsCall()) {
    c_.links_->device().cancelSleep();
    return false;
  }
  return true;
}

void Communicator::WaitState::cancelSleep() { c_.links_->device().cancelSleep(); }

// 1 ms: events a device cannot signal (an ibverbs put64 makes no completion at the
// target) and the periodic checks are seen at the next return.
void Communicator::WaitState::sleep() { c_.links_->device().sleep(seen_, 1); }

void Communicator::WaitState::checkLiveness() {
  Communicator& c = c_;
  for (Peer& p : c.peers_) {
    if (p.ep && !p.ep->alive()) {
      c.abortAll(AbortCode::kPeerDied, "rank " + std::to_string(p.rank) + " (" + p.ep->describe() +
                                           ") died; detected by rank " + std::to_string(c.rank_) +
                                           " while waiting for " + what_);
    }
  }
}

void Communicator::WaitState::periodicChecks() {
  Communicator& c = c_;
  c.checkAbortSlots();
  c.checkDevice();
  checkLiveness();
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (waited > c.protocol_.timeoutSeconds) {
    const std::string frozen = c.frozenText(c.frozenRanks(waited));
    c.abortAll(AbortCode::kTimeout, "timed out after " + std::to_string(static_cast<int>(waited)) +
                                        " s (RDMACOLL_TIMEOUT) on rank " + std::to_string(c.rank_) + " waiting for " +
                                        what_ + (peer_ >= 0 ? " from rank " + std::to_string(peer_) : std::string()) +
                                        (frozen.empty() ? std::string() : "; " + frozen));
  }
  checkStall(waited);
  if (released_) c.hooks_->acquireInterpreter(std::exchange(interpreter_, nullptr));
  bool sig = c.hooks_->signalPending();
  if (released_) interpreter_ = c.hooks_->releaseInterpreter();
  if (sig) {
    try {
      c.abortAll(AbortCode::kInterrupted,
                 "rank " + std::to_string(c.rank_) + " was interrupted (signal) during " + what_);
    } catch (const Error&) {
    }
    throw Interrupted();
  }
}

}  // namespace rdmacoll
