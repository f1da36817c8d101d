// Which interface and address the tcp transport listens on: RDMACOLL_SOCKET_IFNAME's rules
// (NCCL_SOCKET_IFNAME's), as a pure function of the host's interface list, so that the
// rules are tested on any list; systemInterfaces() reads the real one (getifaddrs).
//
// The setting:
//   unset        every interface is allowed
//   eth,ib       allowed: names starting with eth or ib (a comma-separated list of prefixes)
//   =eth0,eth1   allowed: exactly eth0 and eth1
//   ^docker,lo   allowed: every name that starts with none of these (^ applies to the list)
//   ^=docker0    allowed: every name but docker0
// Among the allowed interfaces that are up and have an address, the first in the system's
// order is taken, except that lo (and any loopback), docker*, virbr* and veth* come last,
// in that order (NCCL's default skips lo and docker* unless nothing else is there).
// The address: the interface's first IPv4 address; where it has none, its first IPv6
// address that is not link-local (fe80::/10, which needs a scope that does not travel).
// Nothing allowed and usable: Error naming the setting and every interface that exists.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rdmacoll {
namespace transport {
namespace tcp {

struct IpAddress {
  int family = 0;          // AF_INET, AF_INET6, 0 for none
  uint8_t bytes[16] = {};  // network byte order; IPv4 uses the first 4
};
// "10.0.0.2", "fd00::2" ("" for none).
std::string ipText(const IpAddress& a);
// "10.0.0.2:41321", "[fd00::2]:41321".
std::string endpointText(const IpAddress& a, uint16_t port);
// Parses a numeric IPv4 or IPv6 address; false when it is neither.
bool parseIp(const std::string& text, IpAddress* out);

// One entry of the system's list (getifaddrs gives one per address of each interface,
// plus one without an IP address per interface).
struct InterfaceEntry {
  std::string name;
  unsigned flags = 0;  // IFF_UP, IFF_LOOPBACK, ...
  IpAddress addr;      // family 0: an entry without an IP address
};

struct InterfaceChoice {
  std::string name;
  IpAddress addr;
  std::string why;  // "first interface that is up, not lo/docker*/virbr*/veth*;
                    // RDMACOLL_SOCKET_IFNAME unset"
};

// The rules above over `entries` in the system's order; `spec` is RDMACOLL_SOCKET_IFNAME.
InterfaceChoice chooseInterface(const std::vector<InterfaceEntry>& entries, const std::string& spec);
// "lo (up, 127.0.0.1, ::1), eth1 (down, no address)": every interface and what it has.
std::string describeInterfaces(const std::vector<InterfaceEntry>& entries);
// This host's entries, in getifaddrs order.
std::vector<InterfaceEntry> systemInterfaces();

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
