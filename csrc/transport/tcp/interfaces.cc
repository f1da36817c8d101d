#include "transport/tcp/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/name_list.h"

namespace rdmacoll {
namespace transport {
namespace tcp {

namespace {

constexpr const char* kSetting = "RDMACOLL_SOCKET_IFNAME";
constexpr const char* kSkipped = "lo/docker*/virbr*/veth*";

// RDMACOLL_SOCKET_IFNAME (common/name_list.h's grammar)
using Rule = NameList;

Rule parseRule(const std::string& spec) {
  return parseNameList(spec, "tcp: ", kSetting, false, "interface",
                       "e.g. eth for eth*, =eth0 for eth0 alone, ^docker,lo to exclude");
}

bool startsWith(const std::string& s, const char* prefix) { return s.compare(0, std::strlen(prefix), prefix) == 0; }

// 0 for ordinary interfaces; the ones NCCL-style defaults pass over come after, in this order.
int lateness(const std::string& name, unsigned flags) {
  if (startsWith(name, "docker")) return 1;
  if (startsWith(name, "lo") || (flags & IFF_LOOPBACK)) return 2;
  if (startsWith(name, "virbr")) return 3;
  if (startsWith(name, "veth")) return 4;
  return 0;
}

bool linkLocal(const IpAddress& a) { return a.family == AF_INET6 && a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80; }

// One interface, its entries merged, in the order the system lists them.
struct Iface {
  std::string name;
  unsigned flags = 0;
  IpAddress v4, v6;            // the first of each family (v6: not link-local)
  bool linkLocalOnly = false;  // an IPv6 address, but only link-local ones
  bool up() const { return flags & IFF_UP; }
  const IpAddress* address() const { return v4.family ? &v4 : v6.family ? &v6 : nullptr; }
};

std::vector<Iface> merge(const std::vector<InterfaceEntry>& entries) {
  std::vector<Iface> out;
  for (const InterfaceEntry& e : entries) {
    Iface* f = nullptr;
    for (Iface& x : out) {
      if (x.name == e.name) f = &x;
    }
    if (!f) {
      out.push_back(Iface{});
      f = &out.back();
      f->name = e.name;
    }
    f->flags |= e.flags;
    if (e.addr.family == AF_INET && !f->v4.family) f->v4 = e.addr;
    if (e.addr.family == AF_INET6 && !linkLocal(e.addr) && !f->v6.family) f->v6 = e.addr;
    if (e.addr.family == AF_INET6) f->linkLocalOnly = !f->v6.family;
  }
  return out;
}

// "lo (up, 127.0.0.1, ::1), eth1 (down, no address)": every interface and what it has.
std::string describeAll(const std::vector<Iface>& all) {
  std::string out;
  for (const Iface& f : all) {
    out += (out.empty() ? "" : ", ") + f.name + " (" + (f.up() ? "up" : "down");
    if (f.v4.family) out += ", " + ipText(f.v4);
    if (f.v6.family) out += ", " + ipText(f.v6);
    if (!f.address()) out += f.linkLocalOnly ? ", link-local IPv6 only" : ", no address";
    out += ")";
  }
  return out.empty() ? "none" : out;
}

std::string joined(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

std::string ipText(const IpAddress& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.family != AF_INET && a.family != AF_INET6) return "";
  inet_ntop(a.family, a.bytes, buf, sizeof(buf));
  return buf;
}

std::string endpointText(const IpAddress& a, uint16_t port) {
  const std::string ip = ipText(a);
  return (a.family == AF_INET6 ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
}

bool parseIp(const std::string& text, IpAddress* out) {
  IpAddress a;
  if (inet_pton(AF_INET, text.c_str(), a.bytes) == 1) {
    a.family = AF_INET;
  } else if (inet_pton(AF_INET6, text.c_str(), a.bytes) == 1) {
    a.family = AF_INET6;
  } else {
    return false;
  }
  *out = a;
  return true;
}

InterfaceChoice chooseInterface(const std::vector<InterfaceEntry>& entries, const std::string& spec) {
  const Rule rule = parseRule(spec);
  const std::vector<Iface> all = merge(entries);
  const Iface* best = nullptr;
  std::vector<std::string> excluded;
  for (const Iface& f : all) {
    if (!rule.allows(f.name)) {
      excluded.push_back(f.name);
      continue;
    }
    if (!f.up() || !f.address()) continue;
    if (!best || lateness(f.name, f.flags) < lateness(best->name, best->flags)) best = &f;
  }
  if (!best) {
    const std::string what =
        rule.set ? std::string(kSetting) + "=" + spec + " allows no interface" : std::string("no interface");
    throw Error("tcp: " + what +
                " that is up with an IPv4 or IPv6 address (link-local IPv6 does not count); "
                "interfaces here: " +
                describeAll(all));
  }
  InterfaceChoice c;
  c.name = best->name;
  c.addr = *best->address();
  // Why: what the setting allowed, then how this one was picked among those.
  const bool fallback = lateness(best->name, best->flags) != 0;
  std::string pick;
  if (rule.set && !rule.exclude) {
    pick = "the first of these that is up with an address";
  } else if (fallback) {
    pick = std::string("no interface but ") + kSkipped + " is up with an address";
  } else {
    pick = std::string("first interface that is up with an address, not ") + kSkipped;
  }
  if (c.addr.family == AF_INET6) pick += ", IPv6: it has no IPv4 address";
  if (!rule.set) {
    c.why = pick + "; " + kSetting + " unset";
  } else {
    std::string allowed;
    if (rule.exclude) {
      allowed = excluded.empty() ? "excluded none of the interfaces here" : "excluded " + joined(excluded, ", ");
    } else {
      allowed = rule.describe();
    }
    c.why = std::string(kSetting) + "=" + spec + ": " + allowed + "; " + pick;
  }
  return c;
}

std::string describeInterfaces(const std::vector<InterfaceEntry>& entries) { return describeAll(merge(entries)); }

std::vector<InterfaceEntry> systemInterfaces() {
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw Error(sysError("tcp: getifaddrs", errno));
  std::vector<InterfaceEntry> out;
  for (struct ifaddrs* i = list; i; i = i->ifa_next) {
    InterfaceEntry e;
    e.name = i->ifa_name ? i->ifa_name : "";
    e.flags = i->ifa_flags;
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
      e.addr.family = AF_INET;
      std::memcpy(e.addr.bytes, &reinterpret_cast<struct sockaddr_in*>(i->ifa_addr)->sin_addr, 4);
    } else if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET6) {
      e.addr.family = AF_INET6;
      std::memcpy(e.addr.bytes, &reinterpret_cast<struct sockaddr_in6*>(i->ifa_addr)->sin6_addr, 16);
    }
    out.push_back(e);
  }
  freeifaddrs(list);
  return out;
}

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
