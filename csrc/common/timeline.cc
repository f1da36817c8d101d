#include "common/timeline.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "common/error.h"

namespace rdmacoll {

namespace {
// Trace time 0: 2024-01-01 00:00 UTC. Microseconds since then keep ~10 ns resolution in
// the doubles that trace viewers parse (since 1970 they would not).
constexpr int64_t kEpochSeconds = 1704067200;
// Compute intervals shorter than this between two intervals of one phase are merged
// into them.
constexpr int64_t kMergeNs = 2000;

const char* phaseName(Timeline::Phase p) {
  switch (p) {
    case Timeline::kNegotiate:
      return "negotiate";
    case Timeline::kTransfer:
      return "transfer";
    case Timeline::kReduce:
      return "reduce";
    case Timeline::kCopy:
      return "copy";
    case Timeline::kIdle:
      break;
  }
  return "idle";
}

// JSON string contents: quotes, backslashes and control characters escaped.
std::string escaped(const std::string& s) {
  std::string o;
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
      o += buf;
    } else {
      o += static_cast<char>(ch);
    }
  }
  return o;
}
}  // namespace

std::string Timeline::jsonString(const std::string& s) { return "\"" + escaped(s) + "\""; }

std::string Timeline::rankPath(const std::string& path, int rank) {
  const std::string r = std::to_string(rank);
  size_t at = path.find("{rank}");
  if (at != std::string::npos) return path.substr(0, at) + r + path.substr(at + 6);
  size_t slash = path.rfind('/');
  size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) || dot == slash + 1) {
    return path + ".rank" + r;
  }
  return path.substr(0, dot) + ".rank" + r + path.substr(dot);
}

std::unique_ptr<Timeline> Timeline::open(const std::string& path, int rank) {
  std::string mine = rankPath(path, rank);
  // Not through a symbolic link (one planted in a shared directory such as /tmp would
  // have this rank overwrite whatever it points to); the mode is the user's umask's.
  const int fd = ::open(mine.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0 && errno == ELOOP) {
    throw Error("RDMACOLL_TIMELINE: " + mine + " is a symbolic link; not followed (remove it or choose another path)");
  }
  if (fd < 0) throw Error(sysError("RDMACOLL_TIMELINE: cannot write " + mine, errno));
  std::FILE* f = ::fdopen(fd, "w");
  if (f == nullptr) {
    const int err = errno;
    ::close(fd);
    throw Error(sysError("RDMACOLL_TIMELINE: cannot write " + mine, err));
  }
  std::setvbuf(f, nullptr, _IOFBF, 1 << 16);
  return std::unique_ptr<Timeline>(new Timeline(f, std::move(mine), rank));
}

Timeline::Timeline(std::FILE* f, std::string path, int rank) : f_(f), path_(std::move(path)), rank_(rank) {
  std::fputs("{\"traceEvents\":[\n", f_);
  std::fprintf(f_,
               "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":"
               "\"rank %d\"}},\n"
               "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{"
               "\"sort_index\":%d}},\n"
               "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":"
               "\"collectives\"}}",
               rank, rank, rank, rank, rank);
  first_ = false;
}

Timeline::~Timeline() {
  if (opName_ != nullptr) endOp(true);  // an operation cut short (the communicator is torn down)
  std::fputs("\n],\"displayTimeUnit\":\"ns\"}\n", f_);
  std::fclose(f_);
}

int64_t Timeline::nowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (static_cast<int64_t>(ts.tv_sec) - kEpochSeconds) * 1000000000 + ts.tv_nsec;
}

void Timeline::event(const char* name, const char* cat, int64_t startNs, int64_t durNs, const std::string& args) {
  std::fprintf(f_,
               "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%lld.%"
               "03lld,\"dur\":%lld.%03lld",
               first_ ? "" : ",", name, cat, rank_, static_cast<long long>(startNs / 1000),
               static_cast<long long>(startNs % 1000), static_cast<long long>(durNs / 1000),
               static_cast<long long>(durNs % 1000));
  if (!args.empty()) std::fprintf(f_, ",\"args\":{%s}", args.c_str());
  std::fputc('}', f_);
  first_ = false;
}

void Timeline::switchTo(Phase p) {
  const int64_t now = nowNs();
  if (phase_ != kIdle) {
    if (phase_ == compute_ && p != kIdle && p == pending_.phase && now - phaseSinceNs_ < kMergeNs) {
      // A sliver of bookkeeping between two intervals of the same phase (headers to each
      // peer in turn): one interval.
      phase_ = p;
      phaseSinceNs_ = pending_.startNs;
      pending_.phase = kIdle;
      return;
    }
    flushPending();
    pending_ = {phase_, phaseSinceNs_, now};
  }
  phase_ = p;
  phaseSinceNs_ = now;
  if (p == kIdle) flushPending();
}

void Timeline::flushPending() {
  if (pending_.phase != kIdle && pending_.endNs > pending_.startNs) {
    event(phaseName(pending_.phase), "phase", pending_.startNs, pending_.endNs - pending_.startNs, "");
  }
  pending_.phase = kIdle;
}

void Timeline::beginOp(const char* name, bool reduces, uint64_t seq, int64_t queuedNs, const std::string& argsJson) {
  const int64_t now = nowNs();
  opName_ = name;
  opArgs_ = argsJson;
  opStartNs_ = now;
  if (queuedNs > 0 && queuedNs < now) {
    // Queued operations overlap the ones ahead of them: an async slice of their own
    // (nestable "b"/"e", id = sequence), not a child of the operation.
    for (int i = 0; i < 2; ++i) {
      const int64_t t = i == 0 ? queuedNs : now;
      std::fprintf(f_,
                   "%s\n{\"name\":\"queue\",\"cat\":\"queue\",\"ph\":\"%c\",\"id\":%llu,\"pid\":%d,"
                   "\"tid\":0,"
                   "\"ts\":%lld.%03lld,\"args\":{\"seq\":%llu,\"op\":\"%s\"}}",
                   first_ ? "" : ",", i == 0 ? 'b' : 'e', static_cast<unsigned long long>(seq), rank_,
                   static_cast<long long>(t / 1000), static_cast<long long>(t % 1000),
                   static_cast<unsigned long long>(seq), name);
      first_ = false;
    }
  }
  compute_ = reduces ? kReduce : kCopy;
  depth_ = 0;
  pending_.phase = kIdle;
  phase_ = compute_;
  phaseSinceNs_ = now;
}

void Timeline::endOp(bool failed) {
  if (opName_ == nullptr) return;
  switchTo(kIdle);
  const int64_t now = nowNs();
  std::string args = opArgs_;
  if (failed) args += std::string(args.empty() ? "" : ",") + "\"failed\":true";
  event(opName_, "op", opStartNs_, now - opStartNs_, args);
  opName_ = nullptr;
  depth_ = 0;
}

void Timeline::instant(const char* name, const std::string& text) {
  std::fprintf(f_,
               "%s\n{\"name\":\"%s\",\"cat\":\"stall\",\"ph\":\"i\",\"s\":\"p\",\"pid\":%d,\"tid\":"
               "0,\"ts\":%lld,"
               "\"args\":{\"message\":\"%s\"}}",
               first_ ? "" : ",", name, rank_, static_cast<long long>(nowNs() / 1000), escaped(text).c_str());
  first_ = false;
  std::fflush(f_);
}

}  // namespace rdmacoll
