// Choosing the RDMA device, port and GID this process uses.
//
//   RDMACOLL_IB_HCA=mlx5_0:1,mlx5_1:1       NCCL_IB_HCA's grammar (common/name_list.h:
//                                           prefixes, =exact, ^excluded, :port): the ACTIVE
//                                           ports it allows, in the system's device order,
//                                           are the rails, up to wire::kMaxRails of the
//                                           first one's link layer; default: those of any
//                                           device, as NCCL uses every NIC (RDMACOLL_IB_DEVICE
//                                           =name, its former name, is read as =name:
//                                           rdmacoll/_settings.py)
//   RDMACOLL_IB_GID_INDEX=N                 RoCE: that GID; default: a RoCE v2 GID holding
//                                           an IPv4 address, else any RoCE v2, else RoCE v1
// Both are read from this process's own environment (device names differ between hosts;
// they do not shape the protocol, so rank 0's settings are not imposed on the others).
#pragma once
#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "transport/ibverbs/loader.h"
#include "transport/ibverbs/wire.h"
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

// The rails, each port with a context of its own (the caller closes them). Throws Error
// (diagnose.h's unusable() text) naming why no port can be used: the device list failing
// (ENOSYS: no kernel support), no devices, the requested one missing, no ACTIVE port
// (listing each port's state), or no usable GID on a RoCE port.
std::vector<PortChoice> choosePorts(const Verbs& v, const Options& options);

// Everything this host offers: each device's ports (state, link layer, LID, MTU, GIDs
// with their types), the memlock limit, every ACTIVE port RDMACOLL_IB_HCA allows, and the
// rails choosePorts would take or why none.
TransportReport probe(const Options& options);

// "::ffff:10.0.2.15": a GID as an IPv6 address.
std::string gidText(const ibv_gid& g);

// The GID type as sysfs reports it for (device, port, index): "IB/RoCE v1", "RoCE v2", or "".
std::string gidTypeOf(const ibv_device* dev, uint8_t port, int index);

}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
