// The core's messages: one sink, four levels (RDMACOLL_LOG_LEVEL).
//
// Every message of the core goes through a Log: the communicator's rank is put in front
// of it and the sink receives it when its level is enabled. The binding's sink hands it
// to Python's `logging` (logger "rdmacoll"); without one (C++ tests) lines go to
// stderr. Checking whether a level is on is one comparison, so call sites on the data
// path test enabled() before they build a message.
#pragma once
#include <memory>
#include <string>

namespace rdmacoll {

enum class LogLevel : int { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

// "error", "warning", "info", "debug" (and Horovod's "fatal", "trace" for the outer two),
// any case; throws Error listing them otherwise.
LogLevel parseLogLevel(const std::string& text);
const char* logLevelName(LogLevel level);

class LogSink {
 public:
  virtual ~LogSink() = default;
  // One whole message (no newline), already prefixed; may be called from any thread.
  virtual void write(LogLevel level, const std::string& line) = 0;
};

class Log {
 public:
  // sink null: lines go to stderr as "rdmacoll LEVEL [rank r] message".
  Log(int rank, LogLevel level, std::shared_ptr<LogSink> sink);
  bool enabled(LogLevel level) const { return static_cast<int>(level) <= static_cast<int>(level_); }
  LogLevel level() const { return level_; }
  // Writes "[rank r] message" at `level` when that level is enabled.
  void write(LogLevel level, const std::string& message) const;

 private:
  int rank_;
  LogLevel level_;
  std::shared_ptr<LogSink> sink_;
};

}  // namespace rdmacoll
