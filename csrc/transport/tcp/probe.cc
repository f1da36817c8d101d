// What `rdmacoll doctor` says about tcp on this host: the interface and address a device
// would listen on and why, after trying to listen there, and every interface here.
#include <unistd.h>

#include "common/error.h"
#include "transport/tcp/interfaces.h"
#include "transport/tcp/socket.h"
#include "transport/tcp/tcp.h"

namespace rdmacoll {
namespace transport {
namespace tcp {

TransportReport probe(const Options& options) {
  TransportReport r;
  try {
    const std::vector<InterfaceEntry> entries = systemInterfaces();
    const std::string here = "interfaces here: " + describeInterfaces(entries);
    try {
      const InterfaceChoice c = chooseInterface(entries, options.socketIfname);
      uint16_t port = 0;
      close(listenOn(c.addr, &port, 1));
      r.usable = true;
      r.lines.push_back("listens on " + c.name + " " + ipText(c.addr) + " (" + c.why + ")");
      r.lines.push_back(here);
    } catch (const Error& e) {
      r.lines.push_back(e.what());  // names the interfaces itself
    }
  } catch (const Error& e) {
    r.lines.push_back(e.what());
  }
  return r;
}

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
