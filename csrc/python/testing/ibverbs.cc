// Test hooks for the pure parts of the ibverbs transport (address blob, packed regions,
// key checks, error texts), which tests/test_ibverbs.py exercises on hosts without RDMA
// hardware.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>

#include "common/error.h"
#include "python/testing/hooks.h"
#include "transport/ibverbs/diagnose.h"
#include "transport/ibverbs/wire.h"

namespace py = pybind11;
using namespace rdmacoll::transport;
namespace wire = rdmacoll::transport::ibverbs::wire;

namespace {

py::bytes toBytes(const Bytes& b) { return py::bytes(reinterpret_cast<const char*>(b.data()), b.size()); }

py::bytes packAddress(const py::dict& d) {
  wire::Address a;
  a.rank = d["rank"].cast<int32_t>();
  a.size = d["size"].cast<int32_t>();
  a.linkLayer = d["link_layer"].cast<uint8_t>();
  a.port = d["port"].cast<uint8_t>();
  a.mtu = d["mtu"].cast<uint8_t>();
  a.gidIndex = d["gid_index"].cast<uint8_t>();
  a.lid = d["lid"].cast<uint16_t>();
  a.psn = d["psn"].cast<uint32_t>();
  std::string gid = d["gid"].cast<std::string>();
  if (gid.size() != sizeof(a.gid)) throw rdmacoll::Error("gid must be 16 bytes");
  std::memcpy(a.gid, gid.data(), sizeof(a.gid));
  a.qpn = d["qpn"].cast<std::vector<uint32_t>>();
  if (d.contains("lanes")) a.lanes = d["lanes"].cast<uint16_t>();
  return toBytes(wire::packAddress(a));
}

py::dict unpackAddress(const std::string& bytes, int peer, int self, int size, int lanes) {
  wire::Address a = wire::unpackAddress(Bytes(bytes.begin(), bytes.end()), peer, self, size, lanes);
  py::dict d;
  d["rank"] = a.rank;
  d["size"] = a.size;
  d["link_layer"] = a.linkLayer;
  d["port"] = a.port;
  d["mtu"] = a.mtu;
  d["gid_index"] = a.gidIndex;
  d["lid"] = a.lid;
  d["psn"] = a.psn;
  d["gid"] = py::bytes(reinterpret_cast<const char*>(a.gid), sizeof(a.gid));
  d["qpn"] = a.qpn;
  d["lanes"] = a.lanes;
  return d;
}

py::bytes packRegion(int owner, bool allocated, uint64_t addr, uint64_t len, uint32_t rkey) {
  PackedMemory p;
  wire::packRegion(wire::Region{owner, allocated, addr, len, rkey}, &p);
  return py::bytes(reinterpret_cast<const char*>(p.bytes), sizeof(p.bytes));
}

RemoteMemory remoteFrom(const py::dict& d) {
  RemoteMemory m;
  m.len = d["len"].cast<size_t>();
  m.allocated = d["allocated"].cast<bool>();
  auto key = d["key"].cast<std::vector<uint64_t>>();
  if (key.size() != 4) throw rdmacoll::Error("key must have 4 entries");
  std::copy(key.begin(), key.end(), m.key);
  return m;
}

py::dict unpackRegion(const std::string& bytes, int peer) {
  PackedMemory p{};
  if (bytes.size() != sizeof(p.bytes)) {
    throw rdmacoll::Error("a packed region is " + std::to_string(sizeof(p.bytes)) + " bytes");
  }
  std::memcpy(p.bytes, bytes.data(), sizeof(p.bytes));
  RemoteMemory m;
  wire::unpackRegion(p, peer, &m);
  py::dict d;
  d["len"] = m.len;
  d["allocated"] = m.allocated;
  d["key"] = std::vector<uint64_t>(m.key, m.key + 4);
  return d;
}

}  // namespace

void bindTestingIbverbs(py::module_& m) {
  m.def("ibverbs_pack_address", &packAddress);
  m.def("ibverbs_unpack_address", &unpackAddress, py::arg("bytes"), py::arg("peer"), py::arg("self"), py::arg("size"),
        py::arg("lanes") = 1);
  m.def("ibverbs_pack_region", &packRegion, py::arg("owner"), py::arg("allocated"), py::arg("addr"), py::arg("len"),
        py::arg("rkey"));
  m.def("ibverbs_unpack_region", &unpackRegion, py::arg("bytes"), py::arg("peer"));
  m.def(
      "ibverbs_check_remote",
      [](const py::dict& remote, int peer, size_t off, size_t len, const std::string& what, size_t align) {
        wire::checkRemote(remoteFrom(remote), peer, off, len, what.c_str(), align);
      },
      py::arg("remote"), py::arg("peer"), py::arg("offset"), py::arg("length"), py::arg("what") = "write",
      py::arg("align") = 1);
  m.def("ibverbs_registration_error", [](int err, size_t len, uint64_t memlock) {
    return ibverbs::registrationFailed(err, reinterpret_cast<const void*>(0x10000), len, memlock);
  });
  m.def("ibverbs_device_list_error", [](int err) { return ibverbs::unusable(ibverbs::deviceListFailed(err)); });
}
