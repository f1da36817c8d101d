// Config <-> Python dict: the settings bootstrap reads from RDMACOLL_* (rank 0's,
// broadcast) cross the boundary here, in one place.
#include <algorithm>
#include <pybind11/pybind11.h>

#include "python/bindings.h"
#include <pybind11/stl.h>

#include "comm/config.h"
#include "common/error.h"
#include "tuning/select.h"

namespace py = pybind11;
using rdmacoll::Config;

Config configFromDict(const py::dict& cfg) {
  Config c;
  if (cfg.contains("segment_bytes")) c.segmentBytes = cfg["segment_bytes"].cast<size_t>();
  if (cfg.contains("slot_bytes")) c.slotBytes = cfg["slot_bytes"].cast<size_t>();
  if (cfg.contains("slots")) c.slots = cfg["slots"].cast<int>();
  if (cfg.contains("eager_bytes")) c.eagerBytes = cfg["eager_bytes"].cast<size_t>();
  if (cfg.contains("timeout")) c.timeoutSeconds = cfg["timeout"].cast<double>();
  if (cfg.contains("stall_warning")) c.stallWarningSeconds = cfg["stall_warning"].cast<double>();
  if (cfg.contains("stall_shutdown")) c.stallShutdownSeconds = cfg["stall_shutdown"].cast<double>();
  if (cfg.contains("timeline")) c.timelinePath = cfg["timeline"].cast<std::string>();
  if (cfg.contains("algo")) c.algo = cfg["algo"].cast<std::string>();
  if (cfg.contains("transport")) c.transport = cfg["transport"].cast<std::string>();
  if (c.transport != "auto" && c.transport != "shm" && c.transport != "tcp" && c.transport != "ibverbs") {
    throw rdmacoll::Error("RDMACOLL_TRANSPORT='" + c.transport + "' is not a transport: auto (shm on one host, "
                          "shm + the network between hosts), shm, tcp or ibverbs");
  }
  if (cfg.contains("local_cpus")) c.localCpus = cfg["local_cpus"].cast<int>();
  if (cfg.contains("ranks_per_cpu")) c.ranksPerCpu = std::max(1.0, cfg["ranks_per_cpu"].cast<double>());
  if (cfg.contains("net_transport")) c.netTransport = cfg["net_transport"].cast<std::string>();
  if (cfg.contains("hosts")) c.hostOf = cfg["hosts"].cast<std::vector<int>>();
  if (cfg.contains("cost_model")) {
    // {"shm": {"alpha": s, "beta": s/B, "gamma": s/B}, "tcp": {...}}: missing entries keep
    // the defaults; the network backend's entry is the one of net_transport.
    const py::dict models = cfg["cost_model"].cast<py::dict>();
    auto load = [&](const char* name, rdmacoll::tuning::CostModel* into) {
      if (!models.contains(name)) return;
      const py::dict m = models[name].cast<py::dict>();
      if (m.contains("alpha")) into->alpha = m["alpha"].cast<double>();
      if (m.contains("beta")) into->beta = m["beta"].cast<double>();
      if (m.contains("gamma")) into->gamma = m["gamma"].cast<double>();
    };
    load("shm", &c.costShm);
    load(c.netTransport.c_str(), &c.costNet);
  }
  rdmacoll::tuning::validateCostModel(c.costShm, "shm");
  rdmacoll::tuning::validateCostModel(c.costNet, c.netTransport);
  c.algoRules = rdmacoll::tuning::parseAlgoSetting(c.algo);  // throws, quoting the bad part
  return c;
}

py::dict configToDict(const Config& c) {
  py::dict d;
  d["segment_bytes"] = c.segmentBytes;
  d["slot_bytes"] = c.slotBytes;
  d["slots"] = c.slots;
  d["eager_bytes"] = c.eagerBytes;
  d["timeout"] = c.timeoutSeconds;
  d["stall_warning"] = c.stallWarningSeconds;
  d["stall_shutdown"] = c.stallShutdownSeconds;
  d["timeline"] = c.timelinePath;
  d["algo"] = c.algo;
  d["transport"] = c.transport;
  d["local_cpus"] = c.localCpus;
  d["ranks_per_cpu"] = c.ranksPerCpu;
  py::dict shm;
  shm["alpha"] = c.costShm.alpha;
  shm["beta"] = c.costShm.beta;
  shm["gamma"] = c.costShm.gamma;
  py::dict net;
  net["alpha"] = c.costNet.alpha;
  net["beta"] = c.costNet.beta;
  net["gamma"] = c.costNet.gamma;
  py::dict models;
  models["shm"] = shm;
  models[py::str(c.netTransport)] = net;
  d["net_transport"] = c.netTransport;
  d["cost_model"] = models;
  return d;
}
