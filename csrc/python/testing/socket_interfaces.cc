// Test hook for RDMACOLL_SOCKET_IFNAME's rules (transport/tcp/interfaces.h) over any list of
// interfaces, so that tests/test_ifname.py checks them without making interfaces.
#include <net/if.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "python/testing/hooks.h"
#include "transport/tcp/interfaces.h"

namespace py = pybind11;
namespace net = rdmacoll::transport::tcp;

void bindTestingSocketInterfaces(py::module_& t) {
  t.attr("IFF_UP") = static_cast<int>(IFF_UP);
  t.attr("IFF_LOOPBACK") = static_cast<int>(IFF_LOOPBACK);
  t.def(
      "choose_socket_interface",
      [](const std::string& spec, const std::vector<std::tuple<std::string, unsigned, std::string>>& entries) {
        std::vector<net::InterfaceEntry> list;
        for (const auto& [name, flags, address] : entries) {
          net::InterfaceEntry e;
          e.name = name;
          e.flags = flags;
          if (!address.empty() && !net::parseIp(address, &e.addr)) {
            throw rdmacoll::Error("not an IP address: '" + address + "'");
          }
          list.push_back(e);
        }
        const net::InterfaceChoice c = net::chooseInterface(list, spec);
        return py::make_tuple(c.name, net::ipText(c.addr), c.why);
      },
      py::arg("spec"), py::arg("entries"),
      "RDMACOLL_SOCKET_IFNAME's choice among entries [(name, flags, address or '')] in the "
      "system's "
      "order (one entry per address, as getifaddrs lists them): (name, address, why); raises "
      "RdmacollError when nothing is allowed and usable.");
}
