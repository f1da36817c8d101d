// What the transport registry (registry.cc) knows beyond createDevice.
#pragma once
#include <string>
#include <vector>

namespace rdmacoll {
namespace transport {

// The backends compiled into this build, in preference order ("shm", "ibverbs", ...).
// Compiled is not usable: createDevice says why a compiled backend cannot run here.
std::vector<std::string> compiledTransports();

}  // namespace transport
}  // namespace rdmacoll
