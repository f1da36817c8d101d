// From settings to a group: where the settings table (common/settings.h) meets the layers
// that read it.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "common/log.h"
#include "common/settings.h"
#include "runtime/group.h"
#include "tuning/policy.h"

namespace rdmacoll {

// A setting's value as the core will use it: settings::parse (kind, grammar, bounds),
// then the check of the layer that reads it (RDMACOLL_ALGO against the algorithm table,
// RDMACOLL_TRANSPORT against the transport registry). Throws Error naming the variable.
settings::Value checkSetting(const std::string& name, const std::string& text);

// The protocol init() runs with: the settings, the slot depth (RDMACOLL_SLOTS=0) from the
// constants of the network the job may use (the policy's tuning entries) for `size` ranks.
Protocol protocolFor(const settings::Values& values, const tuning::Policy& policy, int size);

// A group over a new communicator (not yet connected: bootstrap exchanges addresses,
// then calls Group::connect). `measured`: a tuning file's constants by backend name;
// `sink`: where messages at the log_level setting and above go (null: stderr).
std::unique_ptr<Group> makeGroup(int rank, int size, int localSize, const settings::Values& values,
                                 const JobLayout& layout, std::map<std::string, CostModel> measured,
                                 std::shared_ptr<WaitHooks> hooks, std::shared_ptr<LogSink> sink);

}  // namespace rdmacoll
