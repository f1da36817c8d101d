// The registry of transport backends: the one place that knows their names.
#include "transport/registry.h"

#include "common/error.h"
#include "transport/shm/shm.h"
#include "transport/tcp/tcp.h"
#include "transport/transport.h"
#ifdef RDMACOLL_WITH_IBVERBS  // CMake: the verbs headers were found
#include "transport/ibverbs/ibverbs.h"
#endif

namespace rdmacoll {
namespace transport {

void Endpoint::read(const RemoteMemory&, size_t, void*, size_t) {
  throw Error(describe() + ": this transport cannot read peer memory");
}

void* Endpoint::map(RemoteMemory*) { return nullptr; }

void Memory::discard(size_t, size_t) { throw Error("internal: this memory cannot give its pages back"); }

void Device::packUser(const void*, size_t, PackedMemory*) {
  throw Error(std::string(name()) + ": user memory must be registered or staged");
}

std::vector<std::string> compiledTransports() {
  std::vector<std::string> v{"shm", "tcp"};
#ifdef RDMACOLL_WITH_IBVERBS
  v.push_back("ibverbs");
#endif
  return v;
}

std::vector<std::string> knownTransports() { return {"shm", "tcp", "ibverbs"}; }

TransportReport probeTransport(const std::string& name, const Options& options) {
#ifdef RDMACOLL_WITH_IBVERBS
  if (name == "ibverbs") return ibverbs::probe(options);
#endif
  if (name == "tcp") return tcp::probe(options);
  try {
    createDevice(name, 0, 1, options);
    return {true, {}};
  } catch (const Error& e) {
    return {false, {e.what()}};
  }
}

std::unique_ptr<Device> createDevice(const std::string& name, int rank, int size, const Options& options) {
  if (name == "shm") return std::make_unique<shm::ShmDevice>(rank, size);
  if (name == "tcp") return std::make_unique<tcp::TcpDevice>(rank, size, options);
#ifdef RDMACOLL_WITH_IBVERBS
  if (name == "ibverbs") return std::make_unique<ibverbs::IbvDevice>(rank, size, options);
#else
  if (name == "ibverbs") {
    throw Error(
        "transport 'ibverbs' is not compiled into this build (the verbs headers were missing: "
        "install "
        "libibverbs-dev or rdma-core-devel, then reinstall rdmacoll); use shm or tcp");
  }
#endif
  std::string names;
  for (const std::string& n : compiledTransports()) names += (names.empty() ? "" : ", ") + n;
  throw Error("unknown transport '" + name + "'; available here: " + names);
}

}  // namespace transport
}  // namespace rdmacoll
