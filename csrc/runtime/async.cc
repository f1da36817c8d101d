#include "runtime/async.h"

#include <chrono>
#include <utility>

#include "comm/communicator.h"
#include "common/error.h"
#include "common/thread_role.h"
#include "common/timeline.h"

namespace rdmacoll {

namespace {
// The running operation's submission time: execution context of this thread, like the
// operation itself (set around op->run and runInline's fn).
thread_local int64_t tQueuedNs = 0;

struct QueuedSince {
  explicit QueuedSince(int64_t ns) { tQueuedNs = ns; }
  ~QueuedSince() { tQueuedNs = 0; }
};
}  // namespace

int64_t AsyncEngine::queuedSinceNs() { return tQueuedNs; }

void AsyncEngine::drain() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return queue_.empty() && !executing_; });
}

AsyncEngine::~AsyncEngine() {
  drain();
  if (thread_.joinable()) thread_.join();
}

AsyncEngine::Handle AsyncEngine::submit(std::function<void()> fn) {
  auto h = std::make_shared<Op>();
  h->run = std::move(fn);
  h->queuedNs = Timeline::nowNs();
  std::unique_lock<std::mutex> lk(mu_);
  queue_.push_back(h);
  if (!threadRunning_) {
    if (thread_.joinable()) thread_.join();  // the previous one has finished its loop
    threadRunning_ = true;
    thread_ = std::thread([this] { progressLoop(); });
  }
  cv_.notify_all();
  return h;
}

void AsyncEngine::whenDone(const Handle& h, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!h->done) {
      h->onDone = std::move(fn);
      return;
    }
  }
  fn();
}

bool AsyncEngine::poll(const Handle& h) {
  std::lock_guard<std::mutex> g(mu_);
  return h->done;
}

size_t AsyncEngine::outstanding() {
  std::lock_guard<std::mutex> g(mu_);
  return queue_.size() + (executing_ ? 1 : 0);
}

void AsyncEngine::executeQueued(std::unique_lock<std::mutex>& lk, const Handle& until) {
  executing_ = true;
  while (!queue_.empty() && !(until && until->done)) {
    Handle op = queue_.front();
    queue_.pop_front();
    lk.unlock();
    std::string error;
    try {
      QueuedSince q(op->queuedNs);
      op->run();
    } catch (const std::exception& e) {
      error = e.what();
    }
    // The closures may own Python objects, whose release takes the GIL: they are run and
    // dropped without the lock (a thread holding the GIL may be waiting for the lock).
    std::function<void()> ran = std::move(op->run);
    lk.lock();
    op->error = std::move(error);
    op->done = true;
    std::function<void()> onDone = std::move(op->onDone);
    cv_.notify_all();
    lk.unlock();
    ran = nullptr;
    if (onDone) onDone();
    onDone = nullptr;
    op.reset();
    lk.lock();
  }
  executing_ = false;
  cv_.notify_all();
}

void AsyncEngine::progressLoop() {
  threadRole().blockedCallers = &blockedCallers_;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    if (!executing_ && !queue_.empty()) {
      executeQueued(lk, nullptr);
      continue;
    }
    if (queue_.empty()) break;  // nothing left: the thread goes away until the next submit
    cv_.wait(lk);               // someone else executes; pick up what they leave
  }
  threadRunning_ = false;
  cv_.notify_all();
}

bool AsyncEngine::wait(const Handle& h, const std::function<bool()>& interrupted) {
  std::unique_lock<std::mutex> lk(mu_);
  while (!h->done) {
    if (!executing_ && !queue_.empty()) {
      executeQueued(lk, h);
      continue;
    }
    blockedCallers_.fetch_add(1, std::memory_order_relaxed);
    cv_.wait_for(lk, std::chrono::milliseconds(100));
    blockedCallers_.fetch_sub(1, std::memory_order_relaxed);
    if (!h->done && interrupted) {
      lk.unlock();
      bool stop = interrupted();
      lk.lock();
      if (stop) return false;
    }
  }
  return true;
}

AsyncEngine::Inline::Inline(AsyncEngine& e) : e_(e) {
  std::unique_lock<std::mutex> lk(e_.mu_);
  const int64_t queued = e_.executing_ || !e_.queue_.empty() ? Timeline::nowNs() : 0;
  bool released = false;  // the interpreter lock, before sleeping (never under mu_)
  void* token = nullptr;
  for (;;) {
    // Everything queued before this call runs first, here or on the executor.
    while (e_.executing_ || !e_.queue_.empty()) {
      if (!e_.executing_) {
        e_.executeQueued(lk, nullptr);
      } else if (!released && e_.hooks_) {
        lk.unlock();
        token = e_.hooks_->releaseInterpreter();
        released = true;
        lk.lock();
      } else {
        e_.blockedCallers_.fetch_add(1, std::memory_order_relaxed);
        e_.cv_.wait(lk);
        e_.blockedCallers_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    if (!released) break;
    lk.unlock();
    e_.hooks_->acquireInterpreter(std::exchange(token, nullptr));  // then look again: another thread may have begun
    released = false;
    lk.lock();
  }
  e_.executing_ = true;
  tQueuedNs = queued;
}

AsyncEngine::Inline::~Inline() {
  tQueuedNs = 0;
  std::lock_guard<std::mutex> g(e_.mu_);
  e_.executing_ = false;
  e_.cv_.notify_all();
}

}  // namespace rdmacoll
