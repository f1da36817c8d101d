// _core.Communicator: a runtime Group and its collectives, synchronous and asynchronous
// (the operations and their handles: python/operation.h).
//
// A collective is prepared once from its Python arguments (validated here where only
// Python knows the answer: types, shapes, contiguity; the core validates the rest) into a
// Request; a synchronous call runs it on the caller's thread and builds the result, an
// asynchronous one queues it and returns a Handle that builds the result when waited on.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/call.h"
#include "common/error.h"
#include "python/arrays.h"
#include "python/operation.h"
#include "python/bindings.h"
#include "python/device.h"
#include "python/join.h"
#include "runtime/group.h"
#include "runtime/setup.h"

namespace py = pybind11;
using namespace rdmacoll;

namespace {

// Waits release the GIL while they sleep and poll for Ctrl-C; so does a caller waiting
// for its turn on the engine (runtime/async.h). Collectives also run on the progress
// thread, which never holds the GIL: there the hooks do nothing.
class PyHooks : public WaitHooks {
 public:
  void* releaseInterpreter() override { return PyGILState_Check() ? PyEval_SaveThread() : nullptr; }
  void acquireInterpreter(void* token) override {
    if (token) PyEval_RestoreThread(static_cast<PyThreadState*>(token));
  }
  bool signalPending() override { return PyGILState_Check() && PyErr_CheckSignals() != 0; }
};

class PyGroup {
 public:
  PyGroup(int rank, int size, int localSize, const py::dict& settings, const py::dict& layout,
          const py::dict& costModels, py::object log) {
    log_ = pythonLogSink(std::move(log));
    const settings::Values values = valuesFromDict(settings);
    staging_.chunkBytes = values.bytes("cuda_chunk_bytes");
    staging_.ringBytes = values.bytes("cuda_staging_bytes");
    staging_.runtimeLibrary = values.text("cuda_runtime");
    group_ = makeGroup(rank, size, localSize, values, layoutFromDict(layout), costModelsFromDict(costModels),
                       std::make_shared<PyHooks>(), log_);
  }

  PyGroup(std::unique_ptr<Group> g, StagingOptions staging) : group_(std::move(g)), staging_(std::move(staging)) {}

  // A communicator over some of this one's ranks, on its connections (runtime/group.h).
  std::unique_ptr<PyGroup> split(const std::vector<int>& members) {
    py::gil_scoped_release r;  // (it waits for this rank's operations in flight)
    return std::make_unique<PyGroup>(g().split(members), staging_);
  }

  py::bytes address() const {
    auto a = g().address();
    return py::bytes(reinterpret_cast<const char*>(a.data()), a.size());
  }
  int freeChannel(const std::vector<std::string>& addresses) const {
    std::vector<transport::Bytes> all;
    for (const auto& s : addresses) all.emplace_back(s.begin(), s.end());
    return g().freeChannel(all);
  }
  void connect(const std::vector<std::string>& addresses, const std::string& secret) {
    std::vector<transport::Bytes> all;
    for (const auto& s : addresses) all.emplace_back(s.begin(), s.end());
    const transport::Bytes key(secret.begin(), secret.end());
    try {
      py::gil_scoped_release r;  // (it waits for this rank's operations in flight)
      g().connect(all, key);
    } catch (...) {
      deliverQueuedLog(log_);  // (what setup logged comes before its error)
      throw;
    }
    deliverQueuedLog(log_);  // setup's warnings are logged when init() returns
  }

  // ---- preparing each collective
  // The input and its output: `out` when given (checked against the input), else an
  // array from the pool; the output is the result.
  Prepared inOut(Collective coll, py::handle x, py::handle outObj, const char* what) {
    Prepared p;
    py::array in = contiguousInput(x, what);
    py::array out = outObj.is_none() ? poolArray(in) : asArray(outObj, "out");
    p.req.collective = coll;
    p.req.dtype = dtypeOf(in.dtype());
    if (!outObj.is_none()) checkOut(in, out);
    p.req.in = in.data();
    p.req.out = out.mutable_data();
    p.req.count = static_cast<size_t>(in.size());
    p.ready = outObj.is_none() ? py::object(out) : py::reinterpret_borrow<py::object>(outObj);
    p.keepIn = std::move(in);
    p.keepOut = std::move(out);
    return p;
  }
  Prepared allreduce(py::handle x, py::handle out, py::handle op, py::handle name, py::handle shape) {
    Prepared p = inOut(Collective::kAllreduce, x, out, "allreduce");
    p.req.op = opOf(op);
    setName(p.req, name);
    setShape(p.req, p.keepIn, 0, shape);
    return p;
  }
  Prepared broadcast(py::handle x, int root, py::handle out, py::handle name, py::handle shape) {
    Prepared p = inOut(Collective::kBroadcast, x, out, "broadcast");
    p.req.root = root;
    setName(p.req, name);
    setShape(p.req, p.keepIn, 0, shape);
    return p;
  }
  // Rows of unknown count: the result comes from a PoolResult once they are known.
  Prepared gathered(Collective coll, const py::array& in, Finish finish) {
    Prepared p;
    p.req.collective = coll;
    p.req.dtype = dtypeOf(in.dtype());
    p.req.in = in.data();
    p.req.count = rowElemsOf(in);
    p.req.rows = rowsOf(in);
    p.own().result = std::make_unique<PoolResult>(g().comm().pool());
    p.req.result = p.owned->result.get();
    p.finish = finish;
    p.dtype = in.dtype();
    p.dims = shapeWithRows(in, 0);
    p.keepIn = in;
    return p;
  }
  Prepared allgather(py::handle x, py::handle name, py::handle shape) {
    Prepared p = gathered(Collective::kAllgather, contiguousInput(x, "allgather input"), Finish::kRows);
    setName(p.req, name);
    setShape(p.req, p.keepIn, 1, shape);
    return p;
  }
  Prepared alltoall(py::handle x, py::handle splitsObj, py::handle name, py::handle shape) {
    py::array in = contiguousInput(x, "alltoall input");
    Prepared p = gathered(Collective::kAlltoall, in, Finish::kAlltoall);
    const int size = g().comm().size();
    Owned& o = *p.owned;
    o.splits.resize(size);
    o.received.resize(size);
    if (splitsObj.is_none()) {
      if (p.req.rows % size != 0) {
        throw ArgumentError("alltoall: the first dimension (" + std::to_string(p.req.rows) +
                            ") is not divisible by size() (" + std::to_string(size) + "); pass splits");
      }
      std::fill(o.splits.begin(), o.splits.end(), p.req.rows / size);
    } else {
      // Any sequence of integers (list, NumPy array, tensor): small, converted once.
      py::list l = py::module_::import("numpy").attr("asarray")(splitsObj).attr("tolist")();
      if (static_cast<int>(l.size()) != size) {
        throw ArgumentError("alltoall: splits has " + std::to_string(l.size()) + " entries, size() is " +
                            std::to_string(size));
      }
      for (int q = 0; q < size; ++q) {
        if (!PyLong_Check(l[q].ptr()) || PyBool_Check(l[q].ptr())) {
          throw ArgumentError("alltoall: splits must be integers; got " + py::repr(l[q]).cast<std::string>());
        }
        const long long v = l[q].cast<long long>();
        if (v < 0) throw ArgumentError("alltoall: negative split");
        o.splits[q] = static_cast<uint64_t>(v);
      }
    }
    p.req.splits = o.splits.data();
    p.req.received = o.received.data();
    setName(p.req, name);
    setShape(p.req, in, 1, shape);
    return p;
  }
  Prepared reducescatter(py::handle x, py::handle op, py::handle name, py::handle shape) {
    Prepared p;
    py::array in = contiguousInput(x, "reducescatter input");
    p.req.collective = Collective::kReducescatter;
    p.req.dtype = dtypeOf(in.dtype());
    p.req.op = opOf(op);
    p.req.rowElems = rowElemsOf(in);
    p.req.rows = rowsOf(in);
    const size_t mine = reducescatterRows(p.req.rows, g().comm().size(), g().comm().rank());
    py::array out = poolArray(in.dtype(), shapeWithRows(in, mine), mine * p.req.rowElems * in.itemsize());
    p.req.in = in.data();
    p.req.out = out.mutable_data();
    p.req.count = static_cast<size_t>(in.size());
    p.ready = out;
    setShape(p.req, in, 0, shape);
    p.keepIn = std::move(in);
    p.keepOut = std::move(out);
    setName(p.req, name);
    return p;
  }
  Prepared barrier() {
    Prepared p;
    p.req.collective = Collective::kBarrier;
    p.req.dtype = DataType::kUInt8;
    p.ready = py::none();
    return p;
  }

  // ---- device (GPU) memory: its collectives (python/device.h), made on first use
  PyDevice& device() {
    if (closing_) throw Error("rdmacoll is shut down: call rdmacoll.init() again");
    if (!device_) device_ = std::make_unique<PyDevice>(g(), staging_);
    return *device_;
  }

  // ---- running it
  py::object run(Prepared p) {
    size_t rows;
    try {
      rows = g().run(p.req);
    } catch (const Interrupted&) {
      throw py::error_already_set();  // the KeyboardInterrupt the signal handler set
    }
    return p.result(rows);
  }
  Handle submit(Prepared p) {
    p.detach();
    std::shared_ptr<Owned> owned = p.owned;
    AsyncEngine::Handle op = g().submit(p.req, owned, &owned->rows);
    return Handle(g().engine(), std::move(op), std::move(p));
  }

  py::array empty(py::object shape, py::object dtype) {
    py::dtype dt = py::dtype::from_args(dtype);
    dtypeOf(dt);
    std::vector<py::ssize_t> dims;
    if (py::isinstance<py::int_>(shape)) {
      dims.push_back(shape.cast<py::ssize_t>());
    } else {
      for (auto d : shape) dims.push_back(d.cast<py::ssize_t>());
    }
    size_t n = 1;
    for (auto d : dims) {
      if (d < 0) throw ArgumentError("negative dimension in rdmacoll.empty");
      n *= static_cast<size_t>(d);
    }
    return poolArray(dt, dims, n * dt.itemsize());
  }

  Group& group() const { return g(); }
  std::string lastAlgorithm() const { return group_ ? group_->lastAlgorithm() : ""; }
  size_t poolBytes() const { return g().comm().pool()->bytesMapped(); }
  std::string transport() const { return g().comm().transportName(); }
  std::string listenAddress() const { return g().comm().listenAddress(); }
  // How each peer is reached ("" for this rank): the endpoint's description.
  std::vector<std::string> peerTransports() {
    Communicator& c = g().comm();
    std::vector<std::string> out(c.size());
    for (int r = 0; r < c.size(); ++r) {
      if (r != c.rank() && c.peer(r).ep) out[r] = c.peer(r).ep->describe();
    }
    return out;
  }
  // Payload bytes put into and read out of each peer since connect (comm/communicator.h,
  // Peer::bytesPut, bytesGot): [(put, got)] by rank, zeros for this rank.
  std::vector<std::pair<uint64_t, uint64_t>> traffic() {
    Communicator& c = g().comm();
    std::vector<std::pair<uint64_t, uint64_t>> out(c.size(), {0, 0});
    for (int r = 0; r < c.size(); ++r) {
      if (r != c.rank()) out[r] = {c.peer(r).bytesPut, c.peer(r).bytesGot};
    }
    return out;
  }
  int rank() const { return g().comm().rank(); }
  std::vector<int> worldRanks() const {
    std::vector<int> out;
    for (int r = 0; r < g().comm().size(); ++r) out.push_back(g().comm().worldRank(r));
    return out;
  }
  int size() const { return g().comm().size(); }
  bool oversubscribed() const { return g().comm().oversubscribed(); }
  std::string failure() const { return group_ ? abortCodeName(group_->comm().failure()) : ""; }
  double ranksPerCpu() const { return g().comm().ranksPerCpu(); }
  size_t outstanding() const { return g().engine()->outstanding(); }
  void restartTimeline(const std::string& path) {
    py::gil_scoped_release r;  // (it waits for this rank's operations in flight)
    g().restartTimeline(path);
  }
  std::string selected(size_t bytes, const std::string& collective) const {
    return g().selected(collectiveNamed(collective), bytes).name;
  }
  // Whether the algorithm `name` of a collective can run a message of `bytes` in this job
  // (hierarchical needs several hosts, direct same-host peers, eager small messages).
  bool usable(const std::string& name, size_t bytes, const std::string& collective) const {
    const Collective coll = collectiveNamed(collective);
    const algorithms::Algorithm* a = algorithms::find(coll, name);
    if (!a)
      throw ArgumentError("unknown " + collective + " algorithm '" + name + "'; known: " + algorithms::names(coll));
    return a->usable(algorithms::Situation::of(g().comm(), coll, bytes));
  }
  void close() {
    closing_ = true;                // (with the GIL: no thread makes device_ from here on)
    py::gil_scoped_release r;       // queued work finishes (it never needs the GIL)
    if (device_) device_->close();  // (its ring is a block of the group's pool; kept handles raise)
    group_.reset();
    log_.reset();  // (the sink's last owner: it delivers what was queued before close() returns)
  }

 private:
  Group& g() const {
    if (!group_) throw Error("rdmacoll is shut down: call rdmacoll.init() again");
    return *group_;
  }
  py::array poolArray(const py::array& like) {
    std::vector<py::ssize_t> dims(like.shape(), like.shape() + like.ndim());
    return poolArray(like.dtype(), dims, static_cast<size_t>(like.nbytes()));
  }
  py::array poolArray(const py::dtype& dt, const std::vector<py::ssize_t>& dims, size_t bytes) {
    std::shared_ptr<MemoryPool> pool = g().comm().pool();
    return wrapBlock(dt, dims, pool, pool->acquire(bytes));
  }

  std::unique_ptr<Group> group_;
  std::shared_ptr<LogSink> log_;  // (null for a split: it shares its parent's connections)
  StagingOptions staging_;
  bool closing_ = false;
  std::unique_ptr<PyDevice> device_;  // made on the first device call; closed before group_ goes
};

template <typename... Args, typename... Extra>
void defCollective(py::class_<PyGroup>& cls, const char* name, Prepared (PyGroup::*prepare)(Args...),
                   const Extra&... extra) {
  cls.def(name, [prepare](PyGroup& c, Args... a) { return c.run((c.*prepare)(a...)); }, extra...);
  cls.def((std::string(name) + "_async").c_str(),
          [prepare](PyGroup& c, Args... a) { return c.submit((c.*prepare)(a...)); }, extra...);
}

}  // namespace

void bindGroup(py::module_& m) {
  using namespace pybind11::literals;
  bindHandle(m);
  m.def(
      "shape_hash", [](const std::vector<int64_t>& dims) { return hashShape(dims.data(), dims.size()); }, "dims"_a,
      "The key a collective's descriptor carries for a shape (comm/call.h), for the `shape` "
      "argument of callers that fuse tensors: every rank must build it from the same shapes.");
  using P = PyGroup;
  py::class_<P> cls(m, "Communicator");
  cls.def(py::init<int, int, int, const py::dict&, const py::dict&, const py::dict&, py::object>(), py::arg("rank"),
          py::arg("size"), py::arg("local_size"), py::arg("settings"), py::arg("layout"), py::arg("cost_models"),
          py::arg("log") = py::none(),
          "log: emit(level, line) receiving the core's messages at the log_level setting and above "
          "(level 0 error, 1 warning, 2 info, 3 debug); None: they go to stderr.")
      .def("split", &P::split, py::arg("members"),
           "A communicator over `members` (ranks of this one, in its rank order; this rank among "
           "them) on "
           "the same connections: connect it with the addresses of the members, gathered among "
           "them.")
      .def("address", &P::address)
      .def("connect", &P::connect, "addresses"_a, "secret"_a = py::bytes())
      .def("free_channel", &P::freeChannel, "addresses"_a,
           "The channel connect(addresses) would take, the same at every member; -1 when none is free.");
  // Each collective twice: run on the caller's thread, and queued (<name>_async, a Handle)
  defCollective(cls, "allreduce", &P::allreduce, "x"_a, "out"_a, "op"_a, "name"_a, "shape"_a = py::none());
  defCollective(cls, "allgather", &P::allgather, "x"_a, "name"_a, "shape"_a = py::none());
  defCollective(cls, "broadcast", &P::broadcast, "x"_a, "root"_a, "out"_a, "name"_a, "shape"_a = py::none());
  defCollective(cls, "reducescatter", &P::reducescatter, "x"_a, "op"_a, "name"_a, "shape"_a = py::none());
  defCollective(cls, "alltoall", &P::alltoall, "x"_a, "splits"_a, "name"_a, "shape"_a = py::none());
  bindPeerCall(m);  // join (python/join.h)
  cls.def(
         "join_mark", [](P& c, uint64_t episode) { return c.group().markJoined(episode); }, py::arg("episode"),
         "This rank entered join() for the episode-th time (1, 2, ...): every peer learns it, once this rank's "
         "queued work has run. Returns the latest call's sequence number (the same on every rank at the same "
         "point of the job)")
      .def(
          "join_wait", [](P& c, uint64_t episode) { return joinWait(c.group(), episode); }, py::arg("episode"),
          "The next call a peer started (a PeerCall), or None once every rank entered join() `episode` times")
      .def(
          "stand_in", [](P& c, py::handle call) { standIn(c.group(), call); }, py::arg("call"),
          "Run the PeerCall with this rank's part empty (zeros; an allgather or alltoall: no rows)");
  cls.def_property_readonly("device", &P::device, py::return_value_policy::reference_internal,
                            "Its collectives on CUDA memory (_core.DeviceCollectives, made on first use)");
  cls.def("barrier", [](P& c) { c.run(c.barrier()); })
      .def("barrier_async", [](P& c) { return c.submit(c.barrier()); })
      .def("empty", &P::empty)
      .def_property_readonly("outstanding", &P::outstanding)
      .def("close", &P::close)
      .def("selected_algorithm", &P::selected, py::arg("bytes"), py::arg("collective") = "allreduce",
           "What selection runs for a message of `bytes` here (allgather, alltoall: one row per "
           "rank).")
      .def("usable", &P::usable, py::arg("name"), py::arg("bytes"), py::arg("collective") = "allreduce",
           "Whether an algorithm can run (name, bytes) here")
      .def_property_readonly("last_algorithm", &P::lastAlgorithm,
                             "What the latest call ran: a table name, 'from>to' after a "
                             "continuation, 'local' at one rank")
      .def_property_readonly("pool_bytes", &P::poolBytes)
      .def_property_readonly("transport", &P::transport)
      .def_property_readonly("listen_address", &P::listenAddress,
                             "Where the network transport listens: 'eth0 10.0.0.2:41321' (IPv6: "
                             "'eth0 [fd00::2]:41321'); '' when no network transport is open.")
      .def("peer_transports", &P::peerTransports)
      .def("traffic", &P::traffic)
      .def("restart_timeline", &P::restartTimeline, py::arg("path"),
           "Close this rank's timeline file and open path's (\"\": stop): Horovod's start_timeline")
      .def_property_readonly("rank", &P::rank)
      .def_property_readonly("world_ranks", &P::worldRanks, "The world rank of each rank of this communicator")
      .def_property_readonly("size", &P::size)
      .def_property_readonly("oversubscribed", &P::oversubscribed)
      .def_property_readonly("failure", &P::failure,
                             "'' while usable; else why it ended: 'mismatch' (ranks called different "
                             "collectives: every rank is alive), 'peer died', 'peer left', 'timeout', "
                             "'stall', 'interrupted', 'error'")
      .def_property_readonly("ranks_per_cpu", &P::ranksPerCpu,
                             "The most local ranks per CPU of any host (>= 1): the cost model's scale.");
}
