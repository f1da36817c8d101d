// Which backend reaches which peer: the one place that decides it (RDMACOLL_TRANSPORT).
#include <algorithm>
#include <set>

#include "common/error.h"
#include "transport/hybrid/hybrid.h"
#include "transport/transport.h"

namespace rdmacoll {
namespace transport {

std::unique_ptr<Device> createJobDevice(const std::string& setting, const std::string& net, int rank,
                                        const std::vector<int>& hostOf) {
  const int size = static_cast<int>(hostOf.size());
  const size_t hosts = std::set<int>(hostOf.begin(), hostOf.end()).size();
  if (setting == "auto") {
    if (hosts <= 1) return createDevice("shm", rank, size);
    return std::make_unique<hybrid::HybridDevice>(rank, hostOf, createDevice("shm", rank, size),
                                                  createDevice(net, rank, size));
  }
  if (setting == "shm" && hosts > 1) {
    throw Error("RDMACOLL_TRANSPORT=shm, but the ranks run on " + std::to_string(hosts) +
                " hosts: shared memory reaches only peers on the same host (use auto, tcp or ibverbs)");
  }
  return createDevice(setting, rank, size);
}

}  // namespace transport
}  // namespace rdmacoll
