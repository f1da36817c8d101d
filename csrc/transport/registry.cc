// The registry of transport backends: the one place that knows their names.
#include "common/error.h"
#include "transport/shm/shm.h"
#include "transport/transport.h"

namespace rdmacoll {
namespace transport {

void Endpoint::read(const RemoteMemory&, size_t, void*, size_t) {
  throw Error(describe() + ": this transport cannot read peer memory");
}

void* Endpoint::map(RemoteMemory*) { return nullptr; }

void Device::packUser(const void*, size_t, PackedMemory*) {
  throw Error(std::string(name()) + ": user memory must be registered or staged");
}

std::unique_ptr<Device> createDevice(const std::string& name, int rank, int size) {
  if (name == "shm") return std::make_unique<shm::ShmDevice>(rank, size);
  throw Error("unknown transport '" + name + "'; available here: shm");
}

}  // namespace transport
}  // namespace rdmacoll
