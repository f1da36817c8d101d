// join (Horovod's hvd.join()): a rank that ran out of data takes part, with zeros, in the
// collectives the other ranks still run, without their telling it what those are. It
// learns each one from the first message of the call that reaches it: every algorithm
// opens by sending its call header (or its eager message, which carries the same
// {hash, descriptor} line) to each peer it will exchange data with, before it waits for
// anything from that peer. So a rank in join() waits for any peer's first message of its
// next call, reads the descriptor there, and runs that call itself (the Python layer
// chooses what to contribute: rdmacoll/frameworks/_join.py); the message stays queued for
// the call, which reads and checks it as any other. Training ranks do nothing for it:
// a job that never calls join() pays nothing per collective.
//
// The end: each rank counts its entries into join in its own `joined` word (comm/ctrl.h;
// pushed to peers that cannot map its region). Once every rank's count reached this
// episode's, no rank trains, and awaitCall says so.
#include <algorithm>
#include <string>

#include "comm/communicator.h"
#include "comm/primitives.h"
#include "common/error.h"

namespace rdmacoll {

uint64_t Communicator::markJoined(uint64_t episode) {
  const size_t at = ctrlLayout_.joined(rank_);
  word(at).store(episode, std::memory_order_release);
  pushOwnWord(at, episode);
  return seq_;
}

bool Communicator::awaitCall(uint64_t episode, HashedDescriptor* theirs) {
  beginCall();
  // For the stall inspector, this rank waits in its next call (peers that have not started
  // it are the ones named missing; none is taken for stopped inside it).
  HashedDescriptor waiting{};
  waiting.desc.seq = seq_ + 1;
  static constexpr char kName[] = "(in join)";
  std::copy(kName, kName + sizeof(kName), waiting.desc.name);
  announce(waiting);
  pushOwnWord(ctrlLayout_.submitted(rank_), seq_ + 1);  // (publishSubmitted pushes seq_)
  publishedSeq_ = seq_;
  const uint64_t next = seq_ + 1;
  bool arrived = false;
  auto everyoneJoined = [&] {
    for (int r = 0; r < size_; ++r) {
      if (ownWordOf(r, ctrlLayout_.joined(r)) < episode) return false;
    }
    return true;
  };
  auto firstMessage = [&] {
    for (Peer& p : peers_) {
      if (!p.ep) continue;
      uint32_t imm;
      if (!links_->poll(p.link, channel_, &imm)) continue;
      links_->putBack(p.link, imm);  // the call reads it
      const uint32_t kind = prim::tagKind(imm);
      size_t at = 0;
      if (kind == prim::kHeaderTag && imm == prim::tag(prim::kHeaderTag, channel_, next)) {
        at = ctrlLayout_.header(p.rank, next);  // (a CallHeader opens with the same line)
      } else if (kind == prim::kEagerTag && imm == prim::tag(prim::kEagerTag, channel_, next)) {
        at = ctrlLayout_.eager(p.rank, next);
      } else {
        abortAll(AbortCode::kMismatch, "join(): rank " + std::to_string(rank_) +
                                           " waits for the first message of call #" + std::to_string(next) +
                                           " and rank " + std::to_string(p.rank) + " sent message " +
                                           std::to_string(imm) + " (the ranks run different rdmacoll versions?)");
      }
      *theirs = *reinterpret_cast<const HashedDescriptor*>(ctrl() + at);
      arrived = true;
      return true;
    }
    return false;
  };
  waitUntil([&] { return firstMessage() || everyoneJoined(); }, -1,
            "the next collective of the ranks still training (join)");
  if (arrived && theirs->desc.seq != next) {
    abortAll(AbortCode::kMismatch, "join(): call #" + std::to_string(next) + "'s first message from a peer describes " +
                                       describeCall(theirs->desc) + " (the ranks run different rdmacoll versions?)");
  }
  return arrived;
}

}  // namespace rdmacoll
