#include "runtime/setup.h"

#include "common/error.h"
#include "common/log.h"
#include "tuning/rules.h"
#include "tuning/select.h"
#include "transport/transport.h"

namespace rdmacoll {

settings::Value checkSetting(const std::string& name, const std::string& text) {
  const settings::Setting& s = settings::find(name);
  settings::Value v = settings::parse(s, text);
  switch (s.check) {
    case settings::Check::kAlgoRules:
      tuning::parseAlgoRules(v.text, &tuning::knownAlgorithm);
      break;
    case settings::Check::kTransport:
      transport::checkTransportSetting(v.text);
      break;
    case settings::Check::kLogLevel:
      try {
        v.text = logLevelName(parseLogLevel(v.text));  // canonical: "INFO" and "trace" read as info, debug
      } catch (const Error&) {
        throw Error(std::string(s.env) + "='" + v.text + "' is not one of: error, warning, info, debug");
      }
      break;
    case settings::Check::kNone:
      break;
  }
  return v;
}

Protocol protocolFor(const settings::Values& values, const tuning::Policy& policy, int size) {
  return Protocol::from(values, policy.network(transport::networkCandidates(values.text("transport"))), size);
}

std::unique_ptr<Group> makeGroup(int rank, int size, int localSize, const settings::Values& values,
                                 const JobLayout& layout, std::map<std::string, CostModel> measured,
                                 std::shared_ptr<WaitHooks> hooks, std::shared_ptr<LogSink> sink) {
  tuning::Policy policy = tuning::Policy::from(values, std::move(measured));
  auto log = std::make_shared<const Log>(rank, parseLogLevel(values.text("log_level")), std::move(sink));
  auto comm =
      std::make_unique<Communicator>(rank, size, localSize, protocolFor(values, policy, size),
                                     transport::Options::from(values), layout, std::move(hooks), std::move(log));
  return std::make_unique<Group>(std::move(comm), std::move(policy));
}

}  // namespace rdmacoll
