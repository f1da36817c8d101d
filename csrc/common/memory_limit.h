// How much more memory this process can get before the kernel refuses it (RLIMIT_AS) or
// kills a process for it (the machine's available memory, the memory cgroup's limit):
// checked before memory is faulted in, so that a size too large for the machine is an
// error naming what asked for it, never an out-of-memory kill of every rank.
#pragma once
#include <cstddef>
#include <string>

namespace rdmacoll {

struct MemoryHeadroom {
  size_t bytes = static_cast<size_t>(-1);  // the least of the limits below; -1: none known
  std::string limitedBy;                   // which: "MemAvailable", "cgroup memory limit", "RLIMIT_AS"
};

// Reads /proc/meminfo, the process's memory cgroup (v1 or v2, and its ancestors) and
// RLIMIT_AS: tens of microseconds, for allocations, not for collectives. addressSpace
// false: memory already mapped is being faulted in again (RLIMIT_AS does not apply).
MemoryHeadroom memoryHeadroom(bool addressSpace = true);

// Below this an allocation is not checked (it cannot be what kills a machine alone).
constexpr size_t kHeadroomCheckBytes = size_t(16) << 20;

// "N bytes (1.5 GiB)" for messages.
std::string bytesText(size_t n);

}  // namespace rdmacoll
