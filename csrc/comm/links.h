// The connections of a job, shared by every communicator over them (the world and the
// sub-communicators split from it: process sets, torch.distributed groups): the device,
// its memory pool and timeline, one endpoint per rank of the world, and the channels that
// keep the communicators' messages apart. A sub-communicator opens nothing: no second
// bootstrap, no second connection, no second registration of the pool.
//
// Channels: every immediate carries the channel of the communicator it belongs to (its
// bits 24-29, see primitives.h). Communicators that share a pair of ranks use different
// channels; poll() hands each communicator only its own immediates, in the order they
// arrived, and keeps the others' for them. A communicator's channel is the lowest one free
// on every one of its members (channelsInUse() is what a rank contributes).
//
// A communicator that leaves while its peers may still be sending to it (the world of an
// elastic job that lost a rank, closed after the survivors split the next world off it:
// shrinking in place) burns its channel instead of releasing it: the channel is never
// claimed again on these links, and what arrives for it is dropped, so no later
// communicator takes a stale immediate of the old world for one of its own.
//
// Threads: like the device, one thread at a time (the communicators over one Links share
// one executor, runtime/async.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/pool.h"
#include "common/timeline.h"
#include "transport/transport.h"

namespace rdmacoll {

class Links {
 public:
  static constexpr int kChannels = 64;
  static uint32_t channelOf(uint32_t imm) { return (imm >> 24) & (kChannels - 1); }

  // timelinePath: RDMACOLL_TIMELINE ("": none), written by every communicator of the job.
  Links(std::unique_ptr<transport::Device> device, int worldRank, int worldSize, const std::string& timelinePath,
        size_t poolFreeBytes);
  ~Links();
  Links(const Links&) = delete;
  Links& operator=(const Links&) = delete;

  transport::Device& device() const { return *device_; }
  const std::shared_ptr<MemoryPool>& pool() const { return pool_; }
  Timeline* timeline() const { return timeline_.get(); }
  // Closes the timeline (if any), then opens `path` ("": none), while no operation runs
  // (Group::restartTimeline). Horovod's start_timeline/stop_timeline.
  void restartTimeline(const std::string& path);
  int worldRank() const { return worldRank_; }
  int worldSize() const { return static_cast<int>(links_.size()); }

  // The endpoint to world rank r (connect() makes it once, from r's device address).
  void connect(int r, const transport::Bytes& deviceAddress);
  transport::Endpoint* endpoint(int r) const { return links_[r].ep.get(); }

  // The next immediate of `channel` from world rank r, if one has arrived.
  bool poll(int r, uint32_t channel, uint32_t* imm) {
    Link& l = links_[r];
    if (!l.pending.empty() && takePending(l, channel, imm)) return true;
    uint32_t got;
    while (l.ep->pollImmediate(&got)) {
      if (channelOf(got) == channel) {
        *imm = got;
        return true;
      }
      if (burned_ >> channelOf(got) & 1) continue;  // a communicator's that left: dropped
      l.pending.push_back(got);                     // another communicator's: kept for it
    }
    return false;
  }

  // Gives back an immediate that poll() returned: the next poll() of its channel from r
  // returns it again (a rank in join() looks at a call's first message before the call
  // that reads it runs: comm/join.cc).
  void putBack(int r, uint32_t imm) {
    std::vector<uint32_t>& p = links_[r].pending;
    p.insert(p.begin(), imm);
  }

  uint64_t channelsInUse() const { return used_; }
  void claim(uint32_t channel);    // throws Error when it is in use here
  void release(uint32_t channel);  // drops what arrived for it
  void burn(uint32_t channel);     // drops what arrived or arrives for it; never free again
  // A closed sub-communicator's registered memory, kept (registered) until the links go:
  // a peer that has not closed yet may still write into it (a late credit, its leaving
  // word), and over RDMA a write into deregistered memory breaks the shared queue pair.
  void retire(std::unique_ptr<transport::Memory> m) { retired_.push_back(std::move(m)); }

 private:
  struct Link {
    std::unique_ptr<transport::Endpoint> ep;
    std::vector<uint32_t> pending;  // immediates of other channels, in arrival order
  };
  static bool takePending(Link& l, uint32_t channel, uint32_t* imm);

  std::unique_ptr<transport::Device> device_;
  std::vector<std::unique_ptr<transport::Memory>> retired_;  // (destroyed before device_)
  std::shared_ptr<MemoryPool> pool_;
  std::unique_ptr<Timeline> timeline_;
  int worldRank_;
  std::vector<Link> links_;
  uint64_t used_ = 0;
  uint64_t burned_ = 0;  // channels of communicators that left while peers may still send
};

}  // namespace rdmacoll
