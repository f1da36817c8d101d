// The dicts the Python package hands over, converted to the core's types (and back), and
// the core's errors translated: used by _core (settings.cc, group.cc, tuning.cc, module.cc)
// and by the test hooks' own module (testing/), so compiled once into a static library
// that both link (CMakeLists.txt).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/error.h"
#include "python/convert.h"

namespace py = pybind11;
using namespace rdmacoll;

py::dict costModelToDict(const CostModel& m) {
  py::dict d;
  d["alpha"] = m.alpha;
  d["beta"] = m.beta;
  d["gamma"] = m.gamma;
  return d;
}

Collective collectiveNamed(const std::string& name) {
  Collective c;
  if (collectiveFromName(name, &c)) return c;
  std::string known;
  for (Collective k : kCollectives) known += (known.empty() ? "" : ", ") + std::string(collectiveName(k));
  throw Error("unknown collective '" + name + "' (" + known + ")");
}

settings::Values valuesFromDict(const py::dict& d) {
  settings::Values v;
  for (auto kv : d) v.set(py::str(kv.first), py::str(kv.second));
  return v;
}

JobLayout layoutFromDict(const py::dict& d) {
  JobLayout l;
  if (d.contains("hosts")) l.hostOf = d["hosts"].cast<std::vector<int>>();
  if (d.contains("local_cpus")) l.localCpus = d["local_cpus"].cast<int>();
  if (d.contains("ranks_per_cpu")) l.ranksPerCpu = std::max(1.0, d["ranks_per_cpu"].cast<double>());
  if (d.contains("network_offers")) l.networkOffers = d["network_offers"].cast<std::vector<std::string>>();
  return l;
}

CostModel costModelFromDict(const py::dict& d) {
  const double missing = std::numeric_limits<double>::quiet_NaN();
  auto get = [&](const char* k) { return d.contains(k) ? d[k].cast<double>() : missing; };
  return CostModel{get("alpha"), get("beta"), get("gamma")};
}

std::map<std::string, CostModel> costModelsFromDict(const py::dict& d) {
  std::map<std::string, CostModel> out;
  for (auto kv : d) out[py::str(kv.first)] = costModelFromDict(kv.second.cast<py::dict>());
  return out;
}

CostModel fullCostModel(const py::dict& d) {
  const CostModel given = costModelFromDict(d);
  return CostModel{std::isnan(given.alpha) ? kDefaultLocal.alpha : given.alpha,
                   std::isnan(given.beta) ? kDefaultLocal.beta : given.beta,
                   std::isnan(given.gamma) ? kDefaultLocal.gamma : given.gamma};
}

algorithms::Situation situationOf(Collective coll, size_t bytes, int p, int hosts, size_t segmentBytes, int leafRanks) {
  if (hosts < 1 || hosts > p) throw Error("hosts must be in 1..p");
  algorithms::Situation s;
  s.collective = coll;
  s.bytes = bytes;
  s.ranks = p;
  s.hosts = hosts;
  s.ranksPerHost = p % hosts == 0 ? p / hosts : 0;
  s.peersReadable = s.peersMappable = hosts == 1;
  static const settings::Values defaults;  // parsed once
  s.segmentBytes =
      segmentBytes ? segmentBytes : std::min(defaults.bytes("segment_bytes"), defaults.bytes("slot_bytes"));
  s.eagerBytes = SIZE_MAX;
  std::vector<int> hostOf;  // hosts of consecutive ranks, as the bootstrap numbers a regular job's
  if (s.ranksPerHost > 0) {
    for (int r = 0; r < p; ++r) hostOf.push_back(r / s.ranksPerHost);
  }
  s.countCrossings(hostOf, leafRanks);
  return s;
}

void translateError(std::exception_ptr p, PyObject* error, PyObject* valueError, PyObject* memoryError) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const ArgumentError& e) {
    PyErr_SetString(valueError, e.what());
  } catch (const OutOfMemory& e) {
    PyErr_SetString(memoryError, e.what());
  } catch (const Error& e) {
    PyErr_SetString(error, e.what());
  }
}
