#include "comm/links.h"

#include "common/error.h"

namespace rdmacoll {

Links::Links(std::unique_ptr<transport::Device> device, int worldRank, int worldSize, const std::string& timelinePath,
             size_t poolFreeBytes)
    : device_(std::move(device)),
      pool_(std::make_shared<MemoryPool>(device_.get(), poolFreeBytes)),
      worldRank_(worldRank),
      links_(static_cast<size_t>(worldSize)) {
  // (HOROVOD_TIMELINE=DYNAMIC: no file at init; start_timeline() opens one later)
  if (!timelinePath.empty() && timelinePath != "DYNAMIC") timeline_ = Timeline::open(timelinePath, worldRank);
}

void Links::restartTimeline(const std::string& path) {
  timeline_.reset();  // completes the JSON of the previous file
  if (!path.empty()) timeline_ = Timeline::open(path, worldRank_);
}

Links::~Links() {
  timeline_.reset();
  links_.clear();   // endpoints before the device
  pool_->detach();  // arrays from the pool may outlive the device: it stops allocating
}

void Links::connect(int r, const transport::Bytes& deviceAddress) {
  RC_CHECK(r >= 0 && r < worldSize() && r != worldRank_ && !links_[r].ep, "internal: bad link " + std::to_string(r));
  links_[r].ep = device_->connect(r, deviceAddress);
}

bool Links::takePending(Link& l, uint32_t channel, uint32_t* imm) {
  for (size_t i = 0; i < l.pending.size(); ++i) {
    if (channelOf(l.pending[i]) == channel) {
      *imm = l.pending[i];
      l.pending.erase(l.pending.begin() + static_cast<long>(i));
      return true;
    }
  }
  return false;
}

void Links::claim(uint32_t channel) {
  RC_CHECK(channel < kChannels, "no free channel: more than " + std::to_string(kChannels) +
                                    " communicators share these ranks (destroy process sets or groups no longer used)");
  RC_CHECK(!(used_ >> channel & 1),
           "channel " + std::to_string(channel) + " is in use here: communicators were created concurrently");
  used_ |= uint64_t(1) << channel;
}

void Links::burn(uint32_t channel) {
  release(channel);
  used_ |= uint64_t(1) << channel;
  burned_ |= uint64_t(1) << channel;
}

void Links::release(uint32_t channel) {
  used_ &= ~(uint64_t(1) << channel);
  for (Link& l : links_) {
    size_t kept = 0;
    for (uint32_t imm : l.pending) {
      if (channelOf(imm) != channel) l.pending[kept++] = imm;
    }
    l.pending.resize(kept);
  }
}

}  // namespace rdmacoll
