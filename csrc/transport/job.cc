// Which backend reaches which peer: the one place that decides it (RDMACOLL_TRANSPORT).
#include <algorithm>
#include <iterator>
#include <set>
#include <sstream>

#include "common/error.h"
#include "transport/hybrid/hybrid.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace rdmacoll {
namespace transport {

namespace {
// The backend for peers on this host, and the network backends in preference order.
constexpr const char* kLocal = "shm";
const char* const kNetworks[] = {"ibverbs", "tcp"};

std::vector<std::string> split(const std::string& offer) {
  std::vector<std::string> out;
  std::stringstream s(offer);
  for (std::string item; std::getline(s, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// The first backend of rank 0's offer that every rank offers.
std::string agreedNetwork(const std::vector<std::string>& offers) {
  if (offers.empty()) return "tcp";
  for (const std::string& name : split(offers[0])) {
    bool everywhere = true;
    for (const std::string& o : offers) {
      const auto names = split(o);
      everywhere = everywhere && std::find(names.begin(), names.end(), name) != names.end();
    }
    if (everywhere) return name;
  }
  throw Error("the ranks share no network transport (offers: rank 0 '" + offers[0] +
              "', ...): set RDMACOLL_TRANSPORT to one every host can use");
}
}  // namespace

void checkTransportSetting(const std::string& value) {
  std::string names = "auto";
  for (const std::string& n : knownTransports()) {
    if (value == n) return;
    names += ", " + n;
  }
  if (value == "auto") return;
  throw Error("RDMACOLL_TRANSPORT='" + value + "' is not a transport: " + names +
              " (auto: shared memory within a host, the network between hosts)");
}

std::vector<std::string> networkCandidates(const std::string& transportSetting) {
  if (transportSetting == "auto") return std::vector<std::string>(std::begin(kNetworks), std::end(kNetworks));
  if (transportSetting == kLocal) return {};
  return {transportSetting};
}

std::string networkOffer(const Options& options) {
  const std::vector<std::string> compiled = compiledTransports();
  std::string offer;
  for (const char* name : kNetworks) {
    if (std::find(compiled.begin(), compiled.end(), name) == compiled.end()) continue;
    // tcp runs wherever sockets do; others only where their probe finds a usable device.
    if (std::string(name) != "tcp" && !probeTransport(name, options).usable) continue;
    offer += (offer.empty() ? "" : ",") + std::string(name);
  }
  return offer;
}

std::unique_ptr<Device> createJobDevice(const Options& options, int rank, const std::vector<int>& hostOf,
                                        const std::vector<std::string>& offers) {
  checkTransportSetting(options.transport);
  const int size = static_cast<int>(hostOf.size());
  const size_t hosts = std::set<int>(hostOf.begin(), hostOf.end()).size();
  if (options.transport == "auto") {
    if (hosts <= 1) return createDevice(kLocal, rank, size, options);
    return std::make_unique<hybrid::HybridDevice>(rank, hostOf, createDevice(kLocal, rank, size, options),
                                                  createDevice(agreedNetwork(offers), rank, size, options));
  }
  if (options.transport == kLocal && hosts > 1) {
    throw Error("RDMACOLL_TRANSPORT=shm, but the ranks run on " + std::to_string(hosts) +
                " hosts: shared memory reaches only peers on the same host (use auto, tcp or ibverbs)");
  }
  return createDevice(options.transport, rank, size, options);
}

}  // namespace transport
}  // namespace rdmacoll
