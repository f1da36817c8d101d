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
      if (models.contains(name)) *into = costModelFromDict(models[name].cast<py::dict>(), *into);
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
  py::dict models;
  models["shm"] = costModelToDict(c.costShm);
  models[py::str(c.netTransport)] = costModelToDict(c.costNet);
  d["net_transport"] = c.netTransport;
  d["cost_model"] = models;
  return d;
}

rdmacoll::tuning::CostModel costModelFromDict(const py::dict& d, rdmacoll::tuning::CostModel base) {
  if (d.contains("alpha")) base.alpha = d["alpha"].cast<double>();
  if (d.contains("beta")) base.beta = d["beta"].cast<double>();
  if (d.contains("gamma")) base.gamma = d["gamma"].cast<double>();
  return base;
}

py::dict costModelToDict(const rdmacoll::tuning::CostModel& m) {
  py::dict d;
  d["alpha"] = m.alpha;
  d["beta"] = m.beta;
  d["gamma"] = m.gamma;
  return d;
}
