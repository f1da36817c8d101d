// Config <-> Python dict: the settings bootstrap reads from RDMACOLL_* (rank 0's,
// broadcast) cross the boundary here, in one place.
#include <pybind11/pybind11.h>

#include "python/bindings.h"
#include <pybind11/stl.h>

#include "comm/config.h"
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
  if (cfg.contains("algo")) c.algo = cfg["algo"].cast<std::string>();
  if (cfg.contains("transport")) c.transport = cfg["transport"].cast<std::string>();
  if (cfg.contains("local_cpus")) c.localCpus = cfg["local_cpus"].cast<int>();
  if (cfg.contains("cost_model")) {
    // {"shm": {"alpha": s, "beta": s/B, "gamma": s/B}}: missing entries keep the defaults.
    const py::dict models = cfg["cost_model"].cast<py::dict>();
    if (models.contains("shm")) {
      const py::dict m = models["shm"].cast<py::dict>();
      if (m.contains("alpha")) c.costShm.alpha = m["alpha"].cast<double>();
      if (m.contains("beta")) c.costShm.beta = m["beta"].cast<double>();
      if (m.contains("gamma")) c.costShm.gamma = m["gamma"].cast<double>();
    }
  }
  rdmacoll::tuning::validateCostModel(c.costShm, "shm");
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
  d["algo"] = c.algo;
  d["transport"] = c.transport;
  d["local_cpus"] = c.localCpus;
  py::dict shm;
  shm["alpha"] = c.costShm.alpha;
  shm["beta"] = c.costShm.beta;
  shm["gamma"] = c.costShm.gamma;
  py::dict models;
  models["shm"] = shm;
  d["cost_model"] = models;
  return d;
}
