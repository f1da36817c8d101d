// What the transport registry (registry.cc) knows beyond createDevice.
#pragma once
#include <string>
#include <vector>

#include "transport/options.h"

namespace rdmacoll {
namespace transport {

// The backends compiled into this build, in preference order ("shm", "ibverbs", ...).
// Compiled is not usable: createDevice says why a compiled backend cannot run here.
std::vector<std::string> compiledTransports();
// Every backend this code knows, compiled in or not.
std::vector<std::string> knownTransports();

// What a backend finds on this host, for `rdmacoll doctor`: whether createDevice would
// succeed and, one line each, what it found (devices, ports, addresses, limits) or why
// it cannot run. Creates no connection and registers no memory.
struct TransportReport {
  bool usable = false;
  std::vector<std::string> lines;
};
TransportReport probeTransport(const std::string& name, const Options& options);

}  // namespace transport
}  // namespace rdmacoll
