// Layout of each rank's control region: allocated memory exchanged at setup, written by
// peers (write/put64) and read locally. Offsets are computed here, identically on every
// rank; nothing is exchanged per call except what the algorithms write.
//
//   [Words: abort flag, then one cache line of counters per source rank]
//   [Abort messages: one per source rank]
//   [Headers: per source rank, 2 (double-buffered by call parity)]
//   [Eager inbox: per source rank, 2 x eagerBytes]
//   [Slots: per source rank, slots x slotBytes]
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "comm/protocol.h"
#include "transport/transport.h"

namespace rdmacoll {

// Counters written by one source rank into my region. All only grow.
struct alignas(64) PeerWords {
  std::atomic<uint64_t> progress;   // units of the current algorithm finished by the source
  std::atomic<uint64_t> done;       // last call sequence whose reads of my memory finished
  std::atomic<uint64_t> credit;     // how many of my slot messages the source consumed
                                    // (it writes this into my region; I poll it locally)
  std::atomic<uint64_t> submitted;  // last call sequence the source started, for the stall
                                    // inspector: pushed by the source while it waits; in
                                    // my own words (src = me), stored by me at every call
  std::atomic<uint64_t> waiting;    // the source's heartbeat: bumped every check period
                                    // (100 ms) while it waits in a call; in my own words
                                    // (src = me), pushed like `submitted`
  std::atomic<uint64_t> joined;     // how many times the source entered join (comm/join.cc);
                                    // in my own words (src = me), pushed like `submitted`
};

// What every collective tells its peers: who it is (the descriptor, whose hash peers
// compare) and, for algorithms that read peer memory, where its buffers are.
struct Descriptor {
  uint8_t collective = 0;  // 1 = allreduce
  uint8_t dtype = 0;
  uint8_t op = 0;
  uint8_t algorithm = 0;  // id in the algorithm table of what runs (after a continuation: its id)
  int32_t root = -1;
  uint64_t seq = 0;
  uint64_t count = 0;
  uint64_t segmentBytes = 0;
  uint32_t nameHash = 0;
  // The tensor's shape as the collective needs it to agree (hashShape: the whole shape;
  // allgather, alltoall: the dimensions after the first), or a key the caller computed
  // for what it fused (grouped collectives); 0: not checked beyond the count.
  uint32_t shapeHash = 0;
  char name[16] = {};  // first bytes of the name, for messages
};

struct alignas(64) HashedDescriptor {
  uint64_t hash;
  Descriptor desc;
};
static_assert(sizeof(HashedDescriptor) == 64, "one cache line");

struct alignas(64) CallHeader {
  uint64_t hash;  // hash of the descriptor; first thing a peer checks
  Descriptor desc;
  transport::PackedMemory in;    // the sender's input, when the algorithm reads it
  transport::PackedMemory out;   // the sender's output
  uint64_t inOffset, outOffset;  // byte offsets of the buffers inside those regions
  uint64_t extra[2];             // per-destination values (allgather: my rows; alltoall: the first
                                 // row and the rows I send to this peer), not part of the hash
};

// Each rank's abort slot at a peer: its abort word (8 bytes), then its message.
constexpr size_t kAbortMessageBytes = 512;
constexpr size_t kHeaderSlot = (sizeof(CallHeader) + 63) / 64 * 64;

class CtrlLayout {
 public:
  CtrlLayout(int size, const Protocol& c)
      : eagerBytes_(round(c.eagerBytes + 128)), slotBytes_(c.slotBytes), slots_(c.slots) {
    wordsOff_ = 0;
    msgOff_ = wordsOff_ + 64 + sizeof(PeerWords) * size;
    hdrOff_ = msgOff_ + kAbortMessageBytes * size;
    eagerOff_ = hdrOff_ + kHeaderSlot * 2 * size;
    slotOff_ = eagerOff_ + eagerBytes_ * 2 * size;
    total_ = round(slotOff_ + slotBytes_ * slots_ * size);
  }
  size_t total() const { return total_; }
  size_t abortFlag() const { return wordsOff_; }
  size_t words(int src) const { return wordsOff_ + 64 + sizeof(PeerWords) * src; }
  size_t progress(int src) const { return words(src) + offsetof(PeerWords, progress); }
  size_t done(int src) const { return words(src) + offsetof(PeerWords, done); }
  size_t credit(int src) const { return words(src) + offsetof(PeerWords, credit); }
  size_t submitted(int src) const { return words(src) + offsetof(PeerWords, submitted); }
  size_t waiting(int src) const { return words(src) + offsetof(PeerWords, waiting); }
  size_t joined(int src) const { return words(src) + offsetof(PeerWords, joined); }
  size_t abortMessage(int src) const { return msgOff_ + kAbortMessageBytes * src; }
  size_t header(int src, uint64_t seq) const { return hdrOff_ + kHeaderSlot * (2 * src + (seq & 1)); }
  // Eager message: a 64-byte line with the full {hash, descriptor} (read only to name a
  // mismatch, so it stays in the writer's cache), then {hash, payload} from the second
  // line on: 8 bytes of payload cost the receiver one line. Double-buffered by call
  // parity (a rank starts call n+2 only after every peer finished call n+1, which
  // needed my message n+1, sent after I finished reading message n: so slots never clash).
  size_t eager(int src, uint64_t seq) const { return eagerOff_ + eagerBytes_ * (2 * src + (seq & 1)); }
  size_t eagerCapacity() const { return eagerBytes_; }
  size_t slot(int src, uint64_t msg) const { return slotOff_ + slotBytes_ * (slots_ * src + msg % slots_); }

 private:
  static size_t round(size_t n) { return (n + 4095) / 4096 * 4096; }
  size_t eagerBytes_, slotBytes_;
  int slots_;
  size_t wordsOff_, msgOff_, hdrOff_, eagerOff_, slotOff_, total_;
};

}  // namespace rdmacoll
