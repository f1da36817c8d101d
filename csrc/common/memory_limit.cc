#include "common/memory_limit.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace rdmacoll {

namespace {

constexpr size_t kNone = static_cast<size_t>(-1);

void lower(MemoryHeadroom& h, size_t bytes, const char* why) {
  if (bytes < h.bytes) {
    h.bytes = bytes;
    h.limitedBy = why;
  }
}

// Files of the kernel are read with C stdio and strtoull, not through iostreams: on the
// GPU machine (torchrun workers with CUDA loaded) a stream read MemAvailable as 0 where
// Python read the right number, and every allocation was refused (the cause in the stream
// was not found: a locale with digit grouping does not reproduce it).
// One line of f, whole (getline: a cgroup path may be long); false at the end.
bool readLine(FILE* f, std::string* line) {
  char* buf = nullptr;
  size_t cap = 0;
  const ssize_t n = ::getline(&buf, &cap, f);
  if (n >= 0) line->assign(buf, static_cast<size_t>(n));
  std::free(buf);
  return n >= 0;
}

// The first number in the file at path (kNone when it has none: "max", missing files).
size_t readNumber(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return kNone;
  std::string line;
  size_t v = kNone;
  if (readLine(f, &line)) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(line.c_str(), &end, 10);
    if (end != line.c_str()) v = static_cast<size_t>(n);
  }
  std::fclose(f);
  return v;
}

// The least headroom of the cgroup at `path` and its ancestors (limit less usage), lowered
// into h.
void cgroupHeadroom(MemoryHeadroom& h, const std::string& root, std::string path, const char* limitFile,
                    const char* usageFile) {
  for (;;) {
    const std::string dir = root + path;
    const size_t limit = readNumber(dir + "/" + limitFile);
    const size_t usage = readNumber(dir + "/" + usageFile);
    if (limit != kNone && usage != kNone && limit < (size_t(1) << 60)) {
      lower(h, limit > usage ? limit - usage : 0, "cgroup memory limit");
    }
    if (path.empty() || path == "/") return;
    path = path.substr(0, path.find_last_of('/'));
  }
}

}  // namespace

MemoryHeadroom memoryHeadroom(bool addressSpace) {
  MemoryHeadroom h;
  if (FILE* f = std::fopen("/proc/meminfo", "re")) {
    std::string line;
    while (readLine(f, &line)) {
      if (line.compare(0, 13, "MemAvailable:") == 0) {
        const unsigned long long kb = std::strtoull(line.c_str() + 13, nullptr, 10);
        lower(h, static_cast<size_t>(kb) * 1024, "MemAvailable");
        break;
      }
    }
    std::fclose(f);
  }
  {
    FILE* f = std::fopen("/proc/self/cgroup", "re");
    std::string line;
    while (f && readLine(f, &line)) {
      if (!line.empty() && line.back() == '\n') line.pop_back();
      // "0::/path" (v2) or "4:memory:/path" (v1)
      const size_t a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      if (controllers.empty()) {
        cgroupHeadroom(h, "/sys/fs/cgroup", path, "memory.max", "memory.current");
      } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
        cgroupHeadroom(h, "/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes");
      }
    }
    if (f) std::fclose(f);
  }
  rlimit as{};
  if (addressSpace && getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const size_t pages = readNumber("/proc/self/statm");
    if (pages != kNone) {
      const size_t used = pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
      lower(h, as.rlim_cur > used ? static_cast<size_t>(as.rlim_cur) - used : 0, "RLIMIT_AS");
    }
  }
  return h;
}

std::string bytesText(size_t n) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%zu bytes (%.1f %s)", n, v, units[u]);
  return buf;
}

}  // namespace rdmacoll
