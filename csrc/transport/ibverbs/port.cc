#include "transport/ibverbs/port.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "common/error.h"
#include "common/name_list.h"
#include "transport/ibverbs/diagnose.h"

namespace rdmacoll {
namespace transport {
namespace ibverbs {

namespace {

constexpr const char* kHcaSetting = "RDMACOLL_IB_HCA";

NameList hcaList(const Options& options) {
  return parseNameList(options.ibHca, "ibverbs: ", kHcaSetting, true, "device",
                       "e.g. mlx5 for mlx5*, =mlx5_0:1,mlx5_1:1 for those ports, ^mlx5_1 to exclude");
}

const char* stateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
    default:
      return "NOP";
  }
}

bool zeroGid(const ibv_gid& g) {
  for (uint8_t b : g.raw) {
    if (b) return false;
  }
  return true;
}

// ::ffff:a.b.c.d
bool ipv4Mapped(const ibv_gid& g) {
  for (int i = 0; i < 10; ++i) {
    if (g.raw[i]) return false;
  }
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

struct DeviceList {
  const Verbs& v;
  ibv_device** list = nullptr;
  int n = 0;
  ~DeviceList() {
    if (list) v.free_device_list(list);
  }
};

// RoCE: the best GID of the port (see port.h); -1 when none.
int chooseGid(const Verbs& v, ibv_device* dev, ibv_context* ctx, uint8_t port, int tableLen, ibv_gid* out,
              std::string* type) {
  int best = -1, bestScore = 0;
  for (int i = 0; i < tableLen; ++i) {
    ibv_gid g;
    if (v.query_gid(ctx, port, i, &g) != 0 || zeroGid(g)) continue;
    const std::string t = gidTypeOf(dev, port, i);
    const bool v2 = t.find("v2") != std::string::npos;
    const int score = v2 ? (ipv4Mapped(g) ? 3 : 2) : 1;
    if (score > bestScore) {
      best = i, bestScore = score, *out = g, *type = v2 ? "RoCE v2" : "RoCE v1";
    }
  }
  return best;
}

}  // namespace

std::string gidText(const ibv_gid& g) {
  char buf[INET6_ADDRSTRLEN];
  return inet_ntop(AF_INET6, g.raw, buf, sizeof(buf)) ? buf : "?";
}

namespace {

const char* mtuText(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256:
      return "256";
    case IBV_MTU_512:
      return "512";
    case IBV_MTU_1024:
      return "1024";
    case IBV_MTU_2048:
      return "2048";
    case IBV_MTU_4096:
      return "4096";
    default:
      return "?";
  }
}

// The lines probe() prints for one device; the ACTIVE ports `want` allows join *rails.
void describeDevice(const Verbs& v, ibv_device* dev, const NameList& want, std::vector<std::string>* out,
                    std::vector<std::string>* rails) {
  const std::string name = v.get_device_name(dev);
  ibv_context* ctx = v.open_device(dev);
  if (!ctx) {
    out->push_back(sysError(name + ": cannot open", errno));
    return;
  }
  ibv_device_attr da;
  if (v.query_device(ctx, &da) != 0) {
    out->push_back(name + ": ibv_query_device failed");
    v.close_device(ctx);
    return;
  }
  for (int p = 1; p <= da.phys_port_cnt; ++p) {
    ibv_port_attr pa;
    if (v.queryPort(ctx, static_cast<uint8_t>(p), &pa) != 0) continue;
    const bool eth = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    if (pa.state == IBV_PORT_ACTIVE && want.allows(name, p)) rails->push_back(name + ":" + std::to_string(p));
    out->push_back(name + ":" + std::to_string(p) + " " + stateName(pa.state) + ", " +
                   (eth ? "Ethernet (RoCE)" : "InfiniBand, LID " + std::to_string(pa.lid)) + ", active MTU " +
                   mtuText(pa.active_mtu));
    for (int i = 0; i < pa.gid_tbl_len; ++i) {
      ibv_gid g;
      if (v.query_gid(ctx, static_cast<uint8_t>(p), i, &g) != 0 || zeroGid(g)) continue;
      const std::string t = gidTypeOf(dev, static_cast<uint8_t>(p), i);
      out->push_back("  GID[" + std::to_string(i) + "] " + gidText(g) + (t.empty() ? "" : " (" + t + ")"));
    }
  }
  v.close_device(ctx);
}

}  // namespace

TransportReport probe(const Options& options) {
  TransportReport r;
  std::unique_ptr<Verbs> v;
  NameList want;
  try {
    want = hcaList(options);  // a bad setting first, whatever the host has
    v = loadVerbs(options.ibverbsLibrary);
  } catch (const Error& e) {
    r.lines.push_back(e.what());
    return r;
  }
  const uint64_t memlock = memlockLimit();
  r.lines.push_back("memlock limit (ulimit -l): " +
                    (memlock == UINT64_MAX ? std::string("unlimited") : std::to_string(memlock >> 10) + " KiB"));
  std::vector<std::string> rails;
  {
    DeviceList dl{*v};
    dl.list = v->get_device_list(&dl.n);
    for (int d = 0; dl.list && d < dl.n; ++d) describeDevice(*v, dl.list[d], want, &r.lines, &rails);
    std::string list;
    for (const std::string& s : rails) list += (list.empty() ? "" : ", ") + s;
    r.lines.push_back("ACTIVE ports " +
                      (want.set ? std::string(kHcaSetting) + "=" + options.ibHca + " allows" : std::string("here")) +
                      ": " + (list.empty() ? "none" : list));
  }
  try {
    std::vector<PortChoice> rails = choosePorts(*v, options);
    std::string use;
    for (PortChoice& c : rails) {
      v->close_device(c.ctx);
      use += (use.empty() ? "" : "; ") + c.device + ":" + std::to_string(c.port) + ", GID[" +
             std::to_string(c.gidIndex) + "] " + gidText(c.gid) + " (" + c.gidType + ")";
    }
    r.usable = true;
    r.lines.push_back("would use " + (rails.size() > 1 ? std::to_string(rails.size()) + " rails: " : "") + use);
  } catch (const Error& e) {
    r.lines.push_back(e.what());
  }
  return r;
}

std::string gidTypeOf(const ibv_device* dev, uint8_t port, int index) {
  std::ifstream f(std::string(dev->ibdev_path) + "/ports/" + std::to_string(port) + "/gid_attrs/types/" +
                  std::to_string(index));
  std::string s;
  std::getline(f, s);
  return s;
}

std::vector<PortChoice> choosePorts(const Verbs& v, const Options& options) {
  const NameList want = hcaList(options);  // a bad setting first, devices or not
  DeviceList dl{v};
  errno = 0;
  dl.list = v.get_device_list(&dl.n);
  if (!dl.list) throw Error(unusable(deviceListFailed(errno ? errno : ENODEV)));
  if (dl.n == 0) {
    throw Error(
        unusable("no RDMA devices (the kernel supports RDMA but no NIC driver registered a device; "
                 "load the NIC's RDMA driver, or rdma_rxe / siw for software RDMA over Ethernet)"));
  }
  struct Chosen {  // closes what it holds unless handed out
    const Verbs& v;
    std::vector<PortChoice> rails;
    ~Chosen() {
      for (PortChoice& c : rails) {
        if (c.ctx) v.close_device(c.ctx);
      }
    }
  } chosen{v, {}};
  std::string seen;  // "mlx5_0:1 DOWN, ..." for the error text
  bool anyAllowed = false;
  for (int d = 0; d < dl.n && chosen.rails.size() < static_cast<size_t>(wire::kMaxRails); ++d) {
    const std::string name = v.get_device_name(dl.list[d]);
    if (!want.allowsSomePortOf(name)) {
      seen += (seen.empty() ? "" : ", ") + name + " (not allowed)";
      continue;
    }
    ibv_context* ctx = v.open_device(dl.list[d]);
    if (!ctx) {
      seen += (seen.empty() ? "" : ", ") + sysError(name + " cannot be opened", errno);
      continue;
    }
    ibv_device_attr da;
    if (v.query_device(ctx, &da) != 0) {
      seen += (seen.empty() ? "" : ", ") + name + " (query failed)";
      v.close_device(ctx);
      continue;
    }
    for (int p = 1; p <= da.phys_port_cnt && chosen.rails.size() < static_cast<size_t>(wire::kMaxRails); ++p) {
      if (!want.allows(name, p)) continue;
      ibv_port_attr pa;
      if (v.queryPort(ctx, static_cast<uint8_t>(p), &pa) != 0) continue;
      anyAllowed = true;
      seen += (seen.empty() ? "" : ", ") + name + ":" + std::to_string(p) + " " + stateName(pa.state);
      if (pa.state != IBV_PORT_ACTIVE) continue;
      if (!chosen.rails.empty() && pa.link_layer != chosen.rails[0].attr.link_layer) {
        seen += " (not a rail: another link layer than " + chosen.rails[0].device + "'s)";
        continue;
      }
      PortChoice c;
      c.ctx = ctx;
      c.device = name;
      c.port = static_cast<uint8_t>(p);
      c.attr = pa;
      if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
        if (options.ibGidIndex >= 0) {
          c.gidIndex = options.ibGidIndex;
          if (c.gidIndex < 0 || c.gidIndex >= pa.gid_tbl_len || v.query_gid(ctx, c.port, c.gidIndex, &c.gid) != 0 ||
              zeroGid(c.gid)) {
            if (!chosen.rails.empty()) {  // not a rail then; an error only for the first port
              seen += " (not a rail: no GID " + std::to_string(options.ibGidIndex) + ")";
              continue;
            }
            v.close_device(ctx);
            throw Error("RDMACOLL_IB_GID_INDEX=" + std::to_string(options.ibGidIndex) + ": no such GID on " + name +
                        ":" + std::to_string(p) + " (`rdmacoll doctor` lists them)");
          }
          const std::string t = gidTypeOf(dl.list[d], c.port, c.gidIndex);
          c.gidType = t.find("v2") != std::string::npos ? "RoCE v2" : "RoCE v1";
        } else {
          c.gidIndex = chooseGid(v, dl.list[d], ctx, c.port, pa.gid_tbl_len, &c.gid, &c.gidType);
          if (c.gidIndex < 0) {
            seen += " (RoCE, but no GID: no IP address on its network interface)";
            continue;
          }
        }
      } else {
        c.gidType = "IB";
        if (v.query_gid(ctx, c.port, 0, &c.gid) != 0) std::memset(&c.gid, 0, sizeof(c.gid));
        if (pa.lid == 0) {
          seen += " (LID 0: no subnet manager has configured it)";
          continue;
        }
      }
      chosen.rails.push_back(c);
      ctx = nullptr;  // the rail owns it now; another port of this device gets a context of
                      // its own (each rail has its own protection domain and keys)
      if (p < da.phys_port_cnt) ctx = v.open_device(dl.list[d]);
      if (!ctx) break;
    }
    if (ctx) v.close_device(ctx);
  }
  if (!chosen.rails.empty()) {
    std::vector<PortChoice> out;
    out.swap(chosen.rails);
    return out;
  }
  if (want.set && !anyAllowed) {
    throw Error(unusable(std::string(kHcaSetting) + "=" + options.ibHca + " (" + want.describe() +
                         ") allows no port here (found: " + seen + ")"));
  }
  throw Error(unusable("no ACTIVE port with a usable address on any RDMA device (" + seen +
                       "); check cabling and `ibv_devinfo`"));
}

}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
