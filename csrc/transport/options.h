// What the transport layer reads from the settings (common/settings.h): which backend
// reaches which peers, and each backend's per-rank choices (interface, RDMA device). The
// backends never read the environment themselves.
#pragma once
#include <cstdint>
#include <string>

#include "common/settings.h"

namespace rdmacoll {
namespace transport {

struct Options {
  std::string transport;       // RDMACOLL_TRANSPORT: "auto" or one backend's name
  std::string socketIfname;    // RDMACOLL_SOCKET_IFNAME ("": choose)
  std::string ibHca;           // RDMACOLL_IB_HCA (common/name_list.h's grammar with ports; "": any)
  int ibGidIndex = -1;         // RDMACOLL_IB_GID_INDEX (-1: choose)
  uint64_t ibMaxMessage = 0;   // RDMACOLL_IB_MAX_MESSAGE (0: the port's limit)
  int ibQpsPerConnection = 1;  // RDMACOLL_IB_QPS_PER_CONNECTION: queue pairs (lanes) per peer
  std::string ibverbsLibrary;  // RDMACOLL_IBVERBS_LIBRARY ("": the default library)

  static Options from(const settings::Values& v) {
    Options o;
    o.transport = v.text("transport");
    o.socketIfname = v.text("socket_ifname");
    o.ibHca = v.text("ib_hca");
    o.ibGidIndex = static_cast<int>(v.count("ib_gid_index"));
    o.ibMaxMessage = v.bytes("ib_max_message");
    o.ibQpsPerConnection = static_cast<int>(v.count("ib_qps_per_connection"));
    o.ibverbsLibrary = v.text("ibverbs_library");
    return o;
  }
};

}  // namespace transport
}  // namespace rdmacoll
