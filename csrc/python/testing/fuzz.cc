// Test hooks for fuzzing what the core accepts from peers (tests/test_fuzz_inputs.py):
// packed memory descriptors (Endpoint::unpack, then map/read), call headers as a peer
// writes them (descriptor check, buffer locations, bounds of reads), and descriptors
// alone (the mismatch message); and which call a peer's abort word ends (tests/test_errors.py).
// Each hook runs a whole batch in C++ and returns how every case ended; any out-of-bounds
// access shows up under the sanitizers (scripts/sanitize.sh) or as a crash.
//
// Two communicators of one process stand in for two ranks (shm reaches its own pid).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/primitives.h"
#include "common/error.h"
#include "common/fork_guard.h"
#include "python/testing/hooks.h"
#include "comm/call.h"
#include "transport/transport.h"

namespace py = pybind11;
using namespace rdmacoll;

namespace {

// Small slots and a short timeout, as a job would set them.
settings::Values smallSettings() {
  settings::Values v;
  v.set("segment_bytes", "4096");
  v.set("slot_bytes", "4096");
  v.set("slots", "2");
  v.set("eager_bytes", "256");
  v.set("timeout", "5");
  v.set("stall_warning", "0");
  return v;
}

std::unique_ptr<Communicator> communicator(int rank, int size) {
  const settings::Values v = smallSettings();
  return std::make_unique<Communicator>(rank, size, size, Protocol::from(v), transport::Options::from(v), JobLayout{},
                                        nullptr);
}

// Ranks 0 and 1 of a two-rank job, both in this process, connected; plus memory of
// rank 0 that valid packed descriptors can name (templates to mutate).
struct Pair {
  std::unique_ptr<Communicator> a, b;
  MemoryPool::Block* block = nullptr;                   // allocated memory of rank 0
  std::vector<char> user = std::vector<char>(4096, 7);  // user memory of rank 0
  Pair() {
    a = communicator(0, 2);
    b = communicator(1, 2);
    std::vector<transport::Bytes> addrs{a->address(), b->address()};
    a->connect(addrs);
    b->connect(addrs);
    block = a->pool()->acquire(8192);
  }
  ~Pair() { a->pool()->release(block); }
  // Packed bytes of rank 0's control region, allocated block and user buffer.
  std::vector<py::bytes> templates() const {
    std::vector<py::bytes> t;
    transport::Bytes addr = a->address();
    t.emplace_back(reinterpret_cast<const char*>(addr.data() + addr.size() - transport::PackedMemory::kBytes),
                   transport::PackedMemory::kBytes);
    BufferRef r1, r2;
    a->describeBuffer(block->data, 8192, &r1);
    a->describeBuffer(user.data(), user.size(), &r2);
    for (const BufferRef* r : {&r1, &r2}) {
      t.emplace_back(reinterpret_cast<const char*>(r->packed.bytes), sizeof(r->packed.bytes));
    }
    return t;
  }
  std::vector<std::string> unpack(const std::vector<std::string>& cases);
  std::vector<std::string> peerAbort(int code, int ahead, bool overwritten);
  std::vector<std::string> headers(const std::vector<std::string>& cases, bool keepDescriptor,
                                   const std::vector<std::pair<uint64_t, uint64_t>>& readSpans);
};

// Outcome of one case: "ok", or "error: <message>" (an Error is the expected way out).
template <class F>
std::string outcome(F f) {
  try {
    f();
    return "ok";
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
}

// Every case is a 40-byte PackedMemory from rank 0: unpack it on rank 1's endpoint,
// map it where allocated, read the first and last bytes (bounded by what unpack accepted).
std::vector<std::string> Pair::unpack(const std::vector<std::string>& cases) {
  Peer& peer = b->peer(0);
  std::vector<char> buf(256);
  std::vector<std::string> out;
  for (const std::string& c : cases) {
    out.push_back(outcome([&] {
      transport::PackedMemory pm{};
      std::memcpy(pm.bytes, c.data(), std::min(c.size(), sizeof(pm.bytes)));
      transport::RemoteMemory m;
      peer.ep->unpack(pm, &m);
      if (m.allocated) peer.ep->map(&m);
      peer.ep->read(m, 0, buf.data(), std::min<size_t>(m.len, buf.size()));
      if (m.len > 8) peer.ep->read(m, m.len - 8, buf.data(), 8);
    }));
  }
  return out;
}

// Every case: the bytes rank 0 writes as its call header into rank 1's header slot
// (with the right immediate). keepDescriptor: the first line (hash + descriptor) is
// replaced by the valid one for the call, so the rest reaches viewPeer and the reads.
// readSpans: (offset, length) pairs read from the peer's input and output per case.
std::vector<std::string> Pair::headers(const std::vector<std::string>& cases, bool keepDescriptor,
                                       const std::vector<std::pair<uint64_t, uint64_t>>& readSpans) {
  Communicator& b = *this->b;
  Peer& toB = a->peer(1);
  Peer& fromA = b.peer(0);
  std::vector<char> dst(1 << 16);
  std::vector<std::string> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    Call call{};
    call.seq = b.nextSeq();
    Descriptor& d = call.hd.desc;
    d.collective = static_cast<uint8_t>(Collective::kAllreduce);
    d.dtype = static_cast<uint8_t>(DataType::kFloat32);
    d.seq = call.seq;
    d.count = 1024;
    d.segmentBytes = 4096;
    call.hd.hash = hashDescriptor(d);
    b.announce(call.hd);
    CallHeader h;
    std::memset(&h, 0, sizeof(h));
    std::memcpy(&h, cases[i].data(), std::min(cases[i].size(), sizeof(h)));
    if (keepDescriptor) {
      h.hash = call.hd.hash;
      h.desc = d;
    }
    toB.ep->write(&h, toB.ctrl, b.layout().header(0, call.seq), sizeof(h), true,
                  prim::tag(prim::kHeaderTag, b.channel(), call.seq));
    out.push_back(outcome([&] {
      const CallHeader& got = prim::recvHeader(b, fromA, call);
      prim::PeerBuffers bufs;
      prim::viewPeer(fromA, got, &bufs);
      for (const auto& span : readSpans) {
        const size_t len = std::min<uint64_t>(span.second, dst.size());
        if (bufs.in.len) prim::readInput(fromA, bufs, span.first, dst.data(), len);
        if (bufs.out.len) prim::readOutput(fromA, bufs, span.first, dst.data(), len);
      }
    }));
    // The mismatch aborted both "ranks": clear the abort words for the next case.
    b.word(b.layout().abortFlag()).store(0);
    a->word(a->layout().abortFlag()).store(0);
  }
  return out;
}

// Rank 1 waits in its call n while rank 0, in call n + ahead, aborts with `code`; what
// the wait waits for lands 1,000 checks after the abort (data of n from a third rank, on
// another connection than the abort). Outcomes: of call n (the wait, then the check that
// ends every synchronous call), then of the next call's start. Use a new pair each time.
// overwritten: a mismatch of call n+1 from another rank overwrites the abort word before
// rank 1 looks, and what the wait waits for never lands (it needed the aborted rank).
std::vector<std::string> Pair::peerAbort(int code, int ahead, bool overwritten) {
  uint64_t n = b->nextSeq();
  while (ahead < 0 && n < uint64_t(1 - ahead)) n = b->nextSeq();
  while (a->nextSeq() < n + ahead) {
  }
  try {
    a->abortAll(static_cast<AbortCode>(code), "rank 0 gave up");
  } catch (const Error&) {
  }
  if (overwritten) b->word(b->layout().abortFlag()).store(AbortWord::pack(AbortCode::kMismatch, 0, n + 1));
  std::vector<std::string> out;
  int checks = 0;
  out.push_back(outcome([&] {
    b->waitUntil([&] { return !overwritten && ++checks > 1000; }, 0, "data of call n");
    b->checkAbortWord();
  }));
  out.push_back(outcome([&] { b->beginCall(); }));
  return out;
}

// Every case: 64 bytes of a peer's {hash, descriptor}, compared with a valid one.
std::vector<std::string> fuzzDescriptors(const std::vector<std::string>& cases) {
  std::unique_ptr<Communicator> one = communicator(0, 1);
  Communicator& c = *one;
  HashedDescriptor mine{};
  mine.desc.collective = static_cast<uint8_t>(Collective::kAllreduce);
  mine.desc.seq = 1;
  mine.desc.count = 10;
  std::strcpy(mine.desc.name, "grad.w");
  mine.hash = hashDescriptor(mine.desc);
  std::vector<std::string> out;
  for (const std::string& s : cases) {
    HashedDescriptor theirs{};
    std::memcpy(&theirs, s.data(), std::min(s.size(), sizeof(theirs)));
    out.push_back(outcome([&] {
      describeCall(theirs.desc);
      c.checkDescriptor(mine, theirs, 1);
    }));
  }
  return out;
}

}  // namespace

void bindTestingFuzz(py::module_& m) {
  m.attr("PACKED_MEMORY_BYTES") = transport::PackedMemory::kBytes;
  m.attr("CALL_HEADER_BYTES") = sizeof(CallHeader);
  m.attr("DESCRIPTOR_BYTES") = sizeof(HashedDescriptor);
  py::class_<Pair>(m, "FuzzPair", "Ranks 0 and 1 of a two-rank job in this process (fuzzing)")
      .def(py::init<>())
      .def("templates", &Pair::templates, "Valid packed memory of rank 0: control region, allocated, user")
      .def("unpack",
           [](Pair& p, const std::vector<std::string>& cases) {
             py::gil_scoped_release r;
             return p.unpack(cases);
           })
      .def(
          "headers",
          [](Pair& p, const std::vector<std::string>& cases, bool keepDescriptor,
             const std::vector<std::pair<uint64_t, uint64_t>>& spans) {
            py::gil_scoped_release r;
            return p.headers(cases, keepDescriptor, spans);
          },
          py::arg("cases"), py::arg("keep_descriptor"), py::arg("read_spans"));
  m.def(
      "peer_abort",
      [](const std::string& name, int ahead, bool overwritten) {
        int code = 1;
        while (abortCodeName(code)[0] && name != abortCodeName(code)) ++code;
        if (!abortCodeName(code)[0]) throw py::value_error("no abort code named " + name);
        py::gil_scoped_release r;
        return Pair().peerAbort(code, ahead, overwritten);
      },
      py::arg("code"), py::arg("ahead"), py::arg("overwritten") = false,
      "Pair::peerAbort on a new pair, code by its name (abortCodeName): [call n's outcome, call n+1's start]");
  m.def("fuzz_descriptors", [](const std::vector<std::string>& cases) {
    py::gil_scoped_release r;
    return fuzzDescriptors(cases);
  });
}
