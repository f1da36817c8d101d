#include "common/log.h"

#include <cctype>
#include <cstdio>

#include "common/error.h"

namespace rdmacoll {

namespace {

const char* const kNames[] = {"error", "warning", "info", "debug"};

}  // namespace

LogLevel parseLogLevel(const std::string& text) {
  std::string t;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c)))
      t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (t == "fatal") return LogLevel::kError;
  if (t == "trace") return LogLevel::kDebug;
  for (int i = 0; i < 4; ++i) {
    if (t == kNames[i]) return static_cast<LogLevel>(i);
  }
  throw Error("log level '" + text + "' is not one of: error, warning, info, debug");
}

const char* logLevelName(LogLevel level) { return kNames[static_cast<int>(level)]; }

Log::Log(int rank, LogLevel level, std::shared_ptr<LogSink> sink)
    : rank_(rank), level_(level), sink_(std::move(sink)) {}

void Log::write(LogLevel level, const std::string& message) const {
  if (!enabled(level)) return;
  const std::string line = "[rank " + std::to_string(rank_) + "] " + message;
  if (sink_) {
    sink_->write(level, line);
    return;
  }
  std::string upper = logLevelName(level);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::fprintf(stderr, "rdmacoll %s %s\n", upper.c_str(), line.c_str());
  std::fflush(stderr);
}

}  // namespace rdmacoll
