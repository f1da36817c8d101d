// Asynchronous collectives: an ordered queue of operations and one executor at a time.
//
// Ranks submit collectives in the same order, so operations run in submission order;
// handles may be waited on in any order. The executor is whichever thread gets there:
// a progress thread started when work is queued (and gone once the queue is empty), or
// a caller that waits (or submits a synchronous call) while nobody executes; it then
// runs queued work itself, oldest first ("the caller takes over", docs/design.md).
// A synchronous call with nothing queued runs inline at the cost of two uncontended
// lock operations.
//
// Threads: submit/poll/wait/runInline from any thread. Operations run without the
// interpreter lock; they must not touch Python objects (the binding keeps them alive).
// A caller never sleeps on the engine holding the interpreter lock: the thread that
// executes may need it (a wait that released it takes it back), so runInline releases
// it (setHooks) before it sleeps, and the binding releases it around wait() and drain().
// The engine's mutex is never held while the interpreter lock is taken.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace rdmacoll {

class WaitHooks;  // comm/communicator.h

class AsyncEngine {
 public:
  struct Op {
    std::function<void()> run;
    bool done = false;             // guarded by the engine's mutex
    std::string error;             // an Error's message, if it failed
    int64_t queuedNs = 0;          // when submitted (Timeline::nowNs), for the timeline's queue phase
    std::function<void()> onDone;  // whenDone's, guarded by the mutex until it runs
  };
  using Handle = std::shared_ptr<Op>;

  AsyncEngine() = default;
  ~AsyncEngine();  // drains, joins the progress thread
  // Waits until everything submitted has run (the progress thread then ends by itself).
  void drain();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  Handle submit(std::function<void()> fn);
  bool poll(const Handle& h);
  // fn() once h is done: at once on this thread if it is, else on the thread that finishes
  // it, right after (outside the engine's lock; the next operation waits for it). One
  // function per operation.
  void whenDone(const Handle& h, std::function<void()> fn);
  // Until h is done: execute queued work if nobody does, else sleep on the engine.
  // `interrupted()` is asked about every 100 ms; when it returns true wait gives up and
  // returns false (the operation goes on).
  bool wait(const Handle& h, const std::function<bool()>& interrupted);
  // Run fn on this thread once everything submitted before it has run (synchronous
  // calls: they keep their place in the order). Exceptions propagate. A template, so
  // that the synchronous path builds no std::function.
  template <class F>
  void runInline(F&& fn) {
    Inline turn(*this);
    fn();
  }
  size_t outstanding();
  // What a caller does with the interpreter while it sleeps waiting for its turn in
  // runInline (released, so that the thread executing can take it: the Python binding's
  // hooks; without them, nothing). Set once, before any call.
  void setHooks(std::shared_ptr<WaitHooks> hooks) { hooks_ = std::move(hooks); }
  // On the thread running an operation: when that operation was submitted, if it waited
  // for earlier work (asynchronous ops always; a synchronous call only when work was
  // ahead of it), else 0. Read by the timeline (common/timeline.h).
  static int64_t queuedSinceNs();

 private:
  // This thread's turn to execute, for runInline's scope: waits (or runs queued work)
  // until the queue is empty and nobody executes, and hands the turn back when it ends.
  class Inline {
   public:
    explicit Inline(AsyncEngine& e);
    ~Inline();
    Inline(const Inline&) = delete;
    Inline& operator=(const Inline&) = delete;

   private:
    AsyncEngine& e_;
  };
  // Called with lk held and executing_ == false: run queued ops until `until` or empty.
  void executeQueued(std::unique_lock<std::mutex>& lk, const Handle& until);
  void progressLoop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Handle> queue_;
  bool executing_ = false;
  bool threadRunning_ = false;
  std::atomic<int> blockedCallers_{0};  // callers asleep in wait()/Inline (common/thread_role.h)
  std::thread thread_;
  std::shared_ptr<WaitHooks> hooks_;
};

}  // namespace rdmacoll
