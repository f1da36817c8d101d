// Test hooks for the pure parts of the ibverbs transport (address blob, packed regions,
// key checks, error texts), which tests/test_ibverbs.py exercises on hosts without RDMA
// hardware.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "python/testing/hooks.h"
#include "transport/ibverbs/diagnose.h"
#include "transport/ibverbs/wire.h"

namespace py = pybind11;
using namespace rdmacoll::transport;
namespace wire = rdmacoll::transport::ibverbs::wire;

namespace {

py::bytes toBytes(const Bytes& b) { return py::bytes(reinterpret_cast<const char*>(b.data()), b.size()); }

// Addresses as dicts: {rank, size, link_layer, psn, lanes, qpn, rail: [{port, mtu,
// gid_index, lid, gid}, ...]}.
py::bytes packAddress(const py::dict& d) {
  wire::Address a;
  a.rank = d["rank"].cast<int32_t>();
  a.size = d["size"].cast<int32_t>();
  a.linkLayer = d["link_layer"].cast<uint8_t>();
  a.psn = d["psn"].cast<uint32_t>();
  for (const py::handle& h : d["rail"].cast<py::list>()) {
    const py::dict r = h.cast<py::dict>();
    wire::RailAddress ra;
    ra.port = r["port"].cast<uint8_t>();
    ra.mtu = r["mtu"].cast<uint8_t>();
    ra.gidIndex = r["gid_index"].cast<uint8_t>();
    ra.lid = r["lid"].cast<uint16_t>();
    std::string gid = r["gid"].cast<std::string>();
    if (gid.size() != sizeof(ra.gid)) throw rdmacoll::Error("gid must be 16 bytes");
    std::memcpy(ra.gid, gid.data(), sizeof(ra.gid));
    a.rail.push_back(ra);
  }
  a.qpn = d["qpn"].cast<std::vector<uint32_t>>();
  if (d.contains("lanes")) a.lanes = d["lanes"].cast<uint16_t>();
  return toBytes(wire::packAddress(a));
}

py::dict unpackAddress(const std::string& bytes, int peer, int self, int size) {
  wire::Address a = wire::unpackAddress(Bytes(bytes.begin(), bytes.end()), peer, self, size);
  py::dict d;
  d["rank"] = a.rank;
  d["size"] = a.size;
  d["link_layer"] = a.linkLayer;
  d["psn"] = a.psn;
  py::list rails;
  for (const wire::RailAddress& ra : a.rail) {
    py::dict r;
    r["port"] = ra.port;
    r["mtu"] = ra.mtu;
    r["gid_index"] = ra.gidIndex;
    r["lid"] = ra.lid;
    r["gid"] = py::bytes(reinterpret_cast<const char*>(ra.gid), sizeof(ra.gid));
    rails.append(r);
  }
  d["rail"] = rails;
  d["qpn"] = a.qpn;
  d["lanes"] = a.lanes;
  return d;
}

// rkey: one per rail of the owner.
py::bytes packRegion(int owner, bool allocated, uint64_t addr, uint64_t len, const std::vector<uint32_t>& rkey) {
  if (rkey.empty() || rkey.size() > static_cast<size_t>(wire::kMaxRails)) throw rdmacoll::Error("1 or 2 rkeys");
  wire::Region r{owner, allocated, addr, len, static_cast<uint8_t>(rkey.size()), {}};
  std::copy(rkey.begin(), rkey.end(), r.rkey);
  PackedMemory p;
  wire::packRegion(r, &p);
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
  m.def("ibverbs_unpack_address", &unpackAddress, py::arg("bytes"), py::arg("peer"), py::arg("self"), py::arg("size"));
  m.def("ibverbs_pack_region", &packRegion, py::arg("owner"), py::arg("allocated"), py::arg("addr"), py::arg("len"),
        py::arg("rkey"));
  m.def("ibverbs_unpack_region", &unpackRegion, py::arg("bytes"), py::arg("peer"));
  m.def("ibverbs_rkey_of", [](const py::dict& remote, int rail) { return wire::rkeyOf(remoteFrom(remote), rail); });
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
