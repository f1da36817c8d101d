#include "common/memory_limit.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace rdmacoll {

namespace {

constexpr size_t kNone = static_cast<size_t>(-1);

void lower(MemoryHeadroom& h, size_t bytes, const char* why) {
  if (bytes < h.bytes) {
    h.bytes = bytes;
    h.limitedBy = why;
  }
}

// The first number in a file ("max", unreadable: kNone).
size_t readNumber(const std::string& path) {
  std::ifstream f(path);
  unsigned long long v = 0;
  if (!(f >> v)) return kNone;
  return static_cast<size_t>(v);
}

// limit - usage of the cgroup at dir and of each ancestor up to the hierarchy's root.
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
  {
    std::ifstream f("/proc/meminfo");
    std::string key;
    unsigned long long kb = 0;
    std::string unit;
    while (f >> key >> kb >> unit) {
      if (key == "MemAvailable:") {
        lower(h, static_cast<size_t>(kb) * 1024, "MemAvailable");
        break;
      }
    }
  }
  {
    std::ifstream f("/proc/self/cgroup");
    std::string line;
    while (std::getline(f, line)) {
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
  }
  rlimit as{};
  if (addressSpace && getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    std::ifstream f("/proc/self/statm");
    size_t pages = 0;
    if (f >> pages) {
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
