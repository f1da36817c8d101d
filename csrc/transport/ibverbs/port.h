// Choosing the RDMA device, port and GID this process uses.
//
//   RDMACOLL_IB_HCA=mlx5_0:1,mlx5_1:1       NCCL_IB_HCA's grammar (common/name_list.h:
//                                           prefixes, =exact, ^excluded, :port): the first
//                                           ACTIVE port it allows, in the system's device
//                                           order; default: the first ACTIVE port of any
//                                           (RDMACOLL_IB_DEVICE=name, its former name, is
//                                           read as =name: rdmacoll/_settings.py)
//   RDMACOLL_IB_GID_INDEX=N                 RoCE: that GID; default: a RoCE v2 GID holding
//                                           an IPv4 address, else any RoCE v2, else RoCE v1
// Both are read from this process's own environment (device names differ between hosts;
// they do not shape the protocol, so rank 0's settings are not imposed on the others).
#pragma once
#include <infiniband/verbs.h>

#include <string>

#include "transport/ibverbs/loader.h"
#include "transport/registry.h"

namespace rdmacoll {
namespace transport {
namespace ibverbs {

struct PortChoice {
  ibv_context* ctx = nullptr;  // opened; the caller closes it
  std::string device;
  uint8_t port = 0;
  ibv_port_attr attr{};
  int gidIndex = 0;
  ibv_gid gid{};
  std::string gidType;  // "IB", "RoCE v1", "RoCE v2"
};

// Throws Error (diagnose.h's unusable() text) naming why no port can be used: the device
// list failing (ENOSYS: no kernel support), no devices, the requested one missing, no
// ACTIVE port (listing each port's state), or no usable GID on a RoCE port.
PortChoice choosePort(const Verbs& v, const Options& options);

// Everything this host offers: each device's ports (state, link layer, LID, MTU, GIDs
// with their types), the memlock limit, the rails (every ACTIVE port RDMACOLL_IB_HCA
// allows), and the port choosePort would take or why none.
TransportReport probe(const Options& options);

// The GID type as sysfs reports it for (device, port, index): "IB/RoCE v1", "RoCE v2", or "".
std::string gidTypeOf(const ibv_device* dev, uint8_t port, int index);

}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
