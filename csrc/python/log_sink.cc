// The core's log sink for Python (common/log.h): each line goes to a Python callable,
// emit(level, line) with level 0 error .. 3 debug (rdmacoll/_log.py hands it to the
// `rdmacoll` logger).
//
// A line written by a thread that holds the interpreter goes straight through. Any other
// thread (the progress thread, a wait that released the interpreter) queues it for a
// delivery thread, started at the first such line, which takes the interpreter to pass
// it on: a thread of the core never waits for the interpreter, so a main thread that
// holds it while waiting for the core cannot deadlock with a message. Once the
// interpreter is finalizing, lines go to stderr instead. A call that released the
// interpreter and may have logged (setup's connect) waits with deliverQueued() before it
// returns, so that its lines reach the logger before the caller's next statement.
#include <pybind11/pybind11.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "common/log.h"
#include "python/bindings.h"

namespace py = pybind11;
using namespace rdmacoll;

namespace {

bool interpreterUsable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

void toStderr(LogLevel level, const std::string& line) {
  std::fprintf(stderr, "rdmacoll %s %s\n", logLevelName(level), line.c_str());
  std::fflush(stderr);
}

class PyLogSink : public LogSink {
 public:
  explicit PyLogSink(py::object emit) : emit_(std::move(emit)) {}

  ~PyLogSink() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
      if (interpreterUsable() && PyGILState_Check()) {
        py::gil_scoped_release r;  // (the delivery thread may be waiting for it)
        thread_.join();
      } else {
        thread_.join();
      }
    }
    if (!interpreterUsable()) {
      for (auto& item : queue_) toStderr(item.first, item.second);
      emit_.release();  // (no interpreter to drop the reference with)
      return;
    }
    py::gil_scoped_acquire g;
    for (auto& item : queue_) deliver(item.first, item.second);
    emit_ = py::object();
  }

  // With the interpreter held: released while the delivery thread passes on every line
  // queued so far (it needs the interpreter), in their order.
  void deliverQueued() {
    py::gil_scoped_release r;
    std::unique_lock<std::mutex> lk(mu_);  // (released before the interpreter is taken back)
    // (no delivery thread: it could not be started, and the destructor delivers the rest)
    cv_.wait(lk, [&] { return (queue_.empty() && !delivering_) || !thread_.joinable(); });
  }

  void write(LogLevel level, const std::string& line) override {
    if (!interpreterUsable()) return toStderr(level, line);
    if (PyGILState_Check()) return deliver(level, line);
    std::lock_guard<std::mutex> g(mu_);
    queue_.emplace_back(level, line);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    cv_.notify_all();  // (the delivery thread, and deliverQueued's waits)
  }

 private:
  // With the interpreter held. A failing handler must not become the core's error.
  void deliver(LogLevel level, const std::string& line) {
    try {
      emit_(static_cast<int>(level), line);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("rdmacoll log sink");
    }
  }

  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped, nothing left (the destructor drains the rest)
      auto item = std::move(queue_.front());
      queue_.pop_front();
      delivering_ = true;
      lk.unlock();
      if (!interpreterUsable()) {
        toStderr(item.first, item.second);
      } else {
        py::gil_scoped_acquire g;
        deliver(item.first, item.second);
      }
      lk.lock();
      delivering_ = false;
      cv_.notify_all();  // (deliverQueued may be waiting)
    }
  }

  py::object emit_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<LogLevel, std::string>> queue_;
  bool stop_ = false;
  bool delivering_ = false;  // the delivery thread holds a line taken from queue_
  std::thread thread_;
};

}  // namespace

std::shared_ptr<LogSink> pythonLogSink(py::object emit) {
  if (emit.is_none()) return nullptr;
  return std::make_shared<PyLogSink>(std::move(emit));
}

void deliverQueuedLog(const std::shared_ptr<LogSink>& sink) {
  if (auto* s = dynamic_cast<PyLogSink*>(sink.get())) s->deliverQueued();
}
