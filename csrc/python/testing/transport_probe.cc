// _rdmacoll_testing.TransportProbe: the transport contract exposed raw, for the conformance tests
// (tests/test_transport.py). Tests exchange addresses and packed regions themselves
// (through mpi4py), then drive write/put64/poll/read/map on one endpoint per peer.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "python/convert.h"
#include "python/testing/hooks.h"
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <vector>

#include "common/error.h"
#include "transport/transport.h"

namespace py = pybind11;
using namespace rdmacoll;
using namespace rdmacoll::transport;

namespace {

class TransportProbe {
 public:
  // `secret`: the job's, the same on every rank (Device::beginSetup); setup lasts until
  // end_setup().
  TransportProbe(const std::string& name, int rank, int size, const py::dict& settings, const std::string& secret)
      : dev_(createDevice(name, rank, size, Options::from(valuesFromDict(settings)))), eps_(size) {
    dev_->beginSetup(Bytes(secret.begin(), secret.end()));
  }
  std::vector<std::string> endSetup() { return dev_->endSetup(); }

  py::bytes address() const {
    Bytes a = dev_->address();
    return py::bytes(reinterpret_cast<const char*>(a.data()), a.size());
  }
  void connect(int peer, const std::string& addr) {
    eps_.at(peer) = dev_->connect(peer, Bytes(addr.begin(), addr.end()));
  }
  // Allocate a region; returns its index. view(i) is a uint8 array over it.
  int allocate(size_t len) {
    mems_.push_back(dev_->allocate(len));
    return static_cast<int>(mems_.size()) - 1;
  }
  int registerArray(py::array a) {
    mems_.push_back(dev_->registerMemory(a.mutable_data(), static_cast<size_t>(a.nbytes())));
    keep_.push_back(a);
    return static_cast<int>(mems_.size()) - 1;
  }
  py::array view(int i) {
    Memory& m = *mems_.at(i);
    return py::array(py::dtype("uint8"), {static_cast<py::ssize_t>(m.size())}, {}, m.data(), py::cast(this));
  }
  py::bytes pack(int i) const {
    PackedMemory p;
    mems_.at(i)->pack(&p);
    return py::bytes(reinterpret_cast<const char*>(p.bytes), sizeof(p.bytes));
  }
  // Returns the write's ticket (0: done at once); the source must not change before
  // wait_written(peer, ticket).
  uint64_t write(int peer, py::array src, const std::string& remote, size_t off, py::object imm) {
    RemoteMemory r = unpack(peer, remote);
    return ep(peer).write(src.data(), r, off, static_cast<size_t>(src.nbytes()), !imm.is_none(),
                          imm.is_none() ? 0 : imm.cast<uint32_t>());
  }
  void waitWritten(int peer, uint64_t ticket) { ep(peer).waitWritten(ticket); }
  void put64(int peer, const std::string& remote, size_t off, uint64_t value) {
    RemoteMemory r = unpack(peer, remote);
    ep(peer).put64(r, off, value);
  }
  py::object poll(int peer) {
    uint32_t imm;
    if (ep(peer).pollImmediate(&imm)) return py::int_(imm);
    return py::none();
  }
  py::array read(int peer, const std::string& remote, size_t off, size_t len) {
    RemoteMemory r = unpack(peer, remote);
    py::array_t<uint8_t> out(static_cast<py::ssize_t>(len));
    ep(peer).read(r, off, out.mutable_data(), len);
    return out;
  }
  py::object mapRead(int peer, const std::string& remote, size_t off, size_t len) {
    RemoteMemory r = unpack(peer, remote);
    void* p = ep(peer).map(&r);
    if (!p) return py::none();
    if (off > r.len || len > r.len - off) throw Error("mapRead outside the region");
    return py::bytes(static_cast<const char*>(p) + off, len);
  }
  bool alive(int peer) { return ep(peer).alive(); }
  uint32_t capabilities(int peer) { return ep(peer).capabilities(); }
  std::string describe(int peer) { return ep(peer).describe(); }

 private:
  Endpoint& ep(int peer) {
    if (peer < 0 || peer >= static_cast<int>(eps_.size()) || !eps_[peer]) throw Error("no endpoint for that peer");
    return *eps_[peer];
  }
  RemoteMemory unpack(int peer, const std::string& remote) {
    PackedMemory p{};
    std::memcpy(p.bytes, remote.data(), std::min(remote.size(), sizeof(p.bytes)));
    RemoteMemory r;
    ep(peer).unpack(p, &r);
    return r;
  }
  std::unique_ptr<Device> dev_;
  std::vector<std::unique_ptr<Endpoint>> eps_;
  std::vector<std::unique_ptr<Memory>> mems_;
  std::vector<py::array> keep_;
};

}  // namespace

void bindTestingTransport(py::module_& m) {
  py::class_<TransportProbe>(m, "TransportProbe")
      .def(py::init<const std::string&, int, int, const py::dict&, const std::string&>(), py::arg("name"),
           py::arg("rank"), py::arg("size"), py::arg("settings") = py::dict(),
           py::arg("secret") = py::bytes("the conformance tests' job secret"))
      .def("address", &TransportProbe::address)
      .def("end_setup", &TransportProbe::endSetup)
      .def("connect", &TransportProbe::connect)
      .def("allocate", &TransportProbe::allocate)
      .def("register", &TransportProbe::registerArray)
      .def("view", &TransportProbe::view)
      .def("pack", &TransportProbe::pack)
      .def("write", &TransportProbe::write, py::arg("peer"), py::arg("src"), py::arg("remote"), py::arg("offset"),
           py::arg("imm") = py::none())
      .def("wait_written", &TransportProbe::waitWritten)
      .def("put64", &TransportProbe::put64)
      .def("poll", &TransportProbe::poll)
      .def("read", &TransportProbe::read)
      .def("map_read", &TransportProbe::mapRead)
      .def("alive", &TransportProbe::alive)
      .def("capabilities", &TransportProbe::capabilities)
      .def("describe", &TransportProbe::describe);
  m.attr("CAN_READ") = static_cast<int>(kCanRead);
  m.attr("CAN_MAP") = static_cast<int>(kCanMap);
  m.attr("OFFLOADS_WRITES") = static_cast<int>(kOffloadsWrites);
}
