// The settings table and the algorithm table, exported (constants are never restated in
// Python). The dicts the Python package hands over are converted in convert.cc.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <limits>

#include "algorithms/table.h"
#include "common/error.h"
#include "python/bindings.h"
#include "runtime/setup.h"
#include "transport/registry.h"
#include "transport/transport.h"
#include "tuning/policy.h"

namespace py = pybind11;
using namespace rdmacoll;

namespace {

const char* kindName(settings::Kind k) {
  switch (k) {
    case settings::Kind::kBytes:
      return "bytes";
    case settings::Kind::kCount:
      return "count";
    case settings::Kind::kSeconds:
      return "seconds";
    case settings::Kind::kText:
      return "text";
  }
  return "?";
}

py::object typed(const settings::Setting& s, const settings::Value& v) {
  switch (s.kind) {
    case settings::Kind::kBytes:
      return py::int_(v.bytes);
    case settings::Kind::kCount:
      return py::int_(v.count);
    case settings::Kind::kSeconds:
      return py::float_(v.seconds);
    case settings::Kind::kText:
      return py::str(v.text);
  }
  return py::none();
}

}  // namespace

void bindSettings(py::module_& m) {
  py::list rows;
  for (const settings::Setting& s : settings::table()) {
    py::dict row;
    row["name"] = s.name;
    row["env"] = s.env;
    row["alias"] = s.alias ? py::object(py::str(s.alias)) : py::object(py::none());
    row["kind"] = kindName(s.kind);
    row["scope"] = s.scope == settings::Scope::kJob ? "job" : "rank";
    row["default"] = typed(s, settings::parse(s, s.defaultText));
    row["default_text"] = s.defaultText;
    row["choices"] = s.choices ? py::object(py::str(s.choices)) : py::object(py::none());
    row["doc"] = s.doc;
    rows.append(row);
  }
  m.attr("SETTINGS") = py::tuple(rows);
  m.attr("SIZE_FORMS") = settings::bytesForms();
  m.def(
      "parse_size",
      [](const std::string& text, bool allowInf) -> py::object {
        uint64_t v = 0;
        if (!settings::parseBytes(text, allowInf, &v)) {
          throw Error("'" + text + "' is not a size: use " + settings::bytesForms() + (allowInf ? ", or inf" : ""));
        }
        if (v == settings::kInf) return py::float_(INFINITY);
        return py::int_(v);
      },
      py::arg("text"), py::arg("allow_inf") = false,
      "Bytes from a size such as 32768, 32K, 32KB, 32KiB or 1.5M (the grammar of every size "
      "setting); "
      "inf -> float('inf') where allowed.");
  m.def(
      "parse_setting",
      [](const std::string& name, const std::string& text) {
        return typed(settings::find(name), checkSetting(name, text));
      },
      py::arg("name"), py::arg("text"),
      "A setting's value from its text (one grammar for every size), checked as the core will use "
      "it; "
      "raises RdmacollError naming the variable and the accepted forms.");
  py::dict defaults;
  defaults["local"] = costModelToDict(kDefaultLocal);
  defaults["network"] = costModelToDict(kDefaultNetwork);
  m.attr("DEFAULT_COST_MODELS") = defaults;
  m.def(
      "check_cost_model",
      [](const py::dict& model, const std::string& where) { tuning::checkCostModel(costModelFromDict(model), where); },
      py::arg("model"), py::arg("where"), "Raises RdmacollError unless every given constant is finite and >= 0.");

  m.def(
      "algorithms",
      [](const std::string& collective, bool continuations) {
        const Collective coll = collectiveNamed(collective);
        std::vector<std::pair<std::string, std::string>> v;
        for (const algorithms::Algorithm& a : algorithms::table()) {
          if (a.collective == coll && (continuations || !a.continues)) v.emplace_back(a.name, a.description);
        }
        return v;
      },
      py::arg("collective") = "allreduce", py::arg("continuations") = false,
      "The algorithms of a collective: [(name, description)]; with continuations=True also the "
      "steps "
      "an algorithm may continue as ('direct>ring_slots').");

  m.attr("TRANSPORTS") = py::tuple(py::cast(transport::compiledTransports()));
  m.def(
      "probe_transport",
      [](const std::string& name, const py::dict& settings) {
        transport::TransportReport r =
            transport::probeTransport(name, transport::Options::from(valuesFromDict(settings)));
        return py::make_tuple(r.usable, r.lines);
      },
      py::arg("name"), py::arg("settings") = py::dict(),
      "(usable, lines): whether the transport can run on this host and what it found there "
      "(devices, ports, GIDs, limits) or why not. For `rdmacoll doctor`.");
  m.def(
      "network_offer",
      [](const py::dict& settings) {
        return transport::networkOffer(transport::Options::from(valuesFromDict(settings)));
      },
      py::arg("settings") = py::dict(),
      "The network backends this rank could use between hosts, best first ('ibverbs,tcp'): "
      "bootstrap "
      "exchanges them, the transport layer chooses.");
  m.attr("PACKED_MEMORY_BYTES") = transport::PackedMemory::kBytes;  // what travels per region
}
