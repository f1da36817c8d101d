#include "runtime/setup.h"

#include "tuning/rules.h"
#include "tuning/select.h"
#include "transport/transport.h"

namespace rdmacoll {

settings::Value checkSetting(const std::string& name, const std::string& text) {
  const settings::Setting& s = settings::find(name);
  settings::Value v = settings::parse(s, text);
  switch (s.check) {
    case settings::Check::kAlgoRules: tuning::parseAlgoRules(v.text, &tuning::knownAlgorithm); break;
    case settings::Check::kTransport: transport::checkTransportSetting(v.text); break;
    case settings::Check::kNone: break;
  }
  return v;
}

std::unique_ptr<Group> makeGroup(int rank, int size, int localSize, const settings::Values& values,
                                 const JobLayout& layout, std::map<std::string, CostModel> measured,
                                 std::shared_ptr<WaitHooks> hooks) {
  tuning::Policy policy = tuning::Policy::from(values, std::move(measured));
  auto comm = std::make_unique<Communicator>(rank, size, localSize, Protocol::from(values),
                                             transport::Options::from(values), layout, std::move(hooks));
  return std::make_unique<Group>(std::move(comm), std::move(policy));
}

}  // namespace rdmacoll
