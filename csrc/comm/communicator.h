// Communicator: one group of ranks, its peers and its state, over the job's Links (the
// device and its connections, comm/links.h). No globals: two communicators can live in
// one process. The world communicator creates the Links; split() makes a communicator
// over some of its ranks on the same Links (its own control region, sequence numbers,
// mismatch checks and channel; no new connection).
//
// Setup (driven by bootstrap, which owns the only MPI calls):
//   Communicator c(rank, size, localSize, protocol, transportOptions, layout, hooks);
//   bytes = c.address();             // allgathered by bootstrap
//   c.connect(allAddresses);         // endpoints, peers' control regions
// and for a sub-communicator (members: ranks of c, each member calls it alike):
//   auto s = c.split(members);  bytes = s->address();  (gathered among the members)
//   s->connect(membersAddresses);    // peers' control regions, the channel
//
// What algorithms use (comm/ is the only layer they see):
//   peer(r): endpoint + the peer's control region + per-direction counters
//   waitUntil(pred, peer, what): the one way to wait (spin/yield/futex, abort word,
//     peer liveness, timeout, Ctrl-C), see wait.cc
//   abortAll(msg): set every peer's abort word, then throw Error(msg) here
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/call.h"
#include "comm/ctrl.h"
#include "comm/links.h"
#include "comm/pool.h"
#include "comm/protocol.h"
#include "comm/topology.h"
#include "common/log.h"
#include "common/types.h"
#include "transport/transport.h"

namespace rdmacoll {

// Called by waits that last long. Implemented by the binding (Python): the core knows
// nothing of the interpreter.
class WaitHooks {
 public:
  virtual ~WaitHooks() = default;
  // Releases the interpreter if this thread holds it; returns what acquireInterpreter
  // needs to take it back (nullptr: it was not held here, so nothing to take back). Calls
  // nest: a wait inside a caller that released it gets nullptr.
  virtual void* releaseInterpreter() { return nullptr; }
  virtual void acquireInterpreter(void* /*token*/) {}
  // True when a signal handler raised (Ctrl-C); called with the interpreter held.
  virtual bool signalPending() { return false; }
};

struct Peer {
  int rank = -1;                      // in this communicator
  int link = -1;                      // its rank in the world: the Links entry
  transport::Endpoint* ep = nullptr;  // the link's endpoint (owned by the Links)
  transport::RemoteMemory ctrl;       // the peer's control region (of this communicator)
  uint64_t progressSeen = 0;          // units of this peer counted in earlier calls
  uint64_t msgsSent = 0;              // slot messages sent to this peer
  uint64_t msgsReceived = 0;          // slot messages received from it
  uint64_t unwritten = 0;             // ticket of the last write to it not known to have left its source
  // Payload bytes moved with this peer since the communicator connected: put into its memory
  // (slot messages, eager messages, stores into its result) and read out of it (map or
  // read): what tests/test_scale.py holds against the traced schedule (csrc/trace/).
  uint64_t bytesPut = 0, bytesGot = 0;
};

// A user buffer as the peers will address it.
struct BufferRef {
  const void* ptr = nullptr;
  size_t bytes = 0;
  bool allocated = false;  // inside pool memory (peers can map it)
  transport::PackedMemory packed{};
  uint64_t offset = 0;  // of ptr inside the packed region
};

enum class AbortCode : uint32_t {
  kMismatch = 1,
  kPeerDied = 2,
  kInterrupted = 3,
  kTimeout = 4,
  kError = 5,
  kStall = 6,
  kPeerLeft = 7
};
// How Python names an abort's code (Communicator::failure(), rdmacoll.init's rebuild): ""
// for 0 (none), "mismatch", "peer died", "interrupted", "timeout", "error", "stall", "peer left".
const char* abortCodeName(uint32_t code);

// The abort word (CtrlLayout::abortFlag), one 64-bit store so that it is read whole: the
// AbortCode (8 bits), the aborting rank + 1 (24 bits: never 0 once set) and the low 32
// bits of the call it gave up in (its seq; wraps, compared as a difference).
struct AbortWord {
  static uint64_t pack(AbortCode code, int rank, uint64_t seq) {
    return (static_cast<uint64_t>(code) << 56) | ((static_cast<uint64_t>(rank + 1) & 0xffffffu) << 32) |
           (seq & 0xffffffffu);
  }
  static uint32_t code(uint64_t w) { return static_cast<uint32_t>(w >> 56); }
  static int rank(uint64_t w) { return static_cast<int>((w >> 32) & 0xffffffu) - 1; }
  // Whether an abort ends call `seq` at a rank still in it: every abort does, except a
  // mismatch found in a later call. The peer that found it had finished `seq`, so all
  // that `seq` waits for was sent (on another connection than the abort, perhaps, and so
  // landing after it): `seq` completes, as it did at that peer, and the next call raises.
  static bool ends(uint64_t w, uint64_t seq) {
    if (w == 0) return false;
    const auto later = static_cast<int32_t>(static_cast<uint32_t>(w) - static_cast<uint32_t>(seq));
    return !(code(w) == static_cast<uint32_t>(AbortCode::kMismatch) && later > 0);
  }
};

class Communicator {
 public:
  Communicator(int rank, int size, int localSize, const Protocol& protocol, const transport::Options& options,
               const JobLayout& layout, std::shared_ptr<WaitHooks> hooks, std::shared_ptr<const Log> log = nullptr);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // The world's: device address + control region; a sub-communicator's: control region
  // + the channels in use at this rank.
  transport::Bytes address() const;
  // `secret`: the job's (bootstrap's), which the world's connections prove (transport.h,
  // Device::beginSetup); a sub-communicator makes no connection and ignores it.
  void connect(const std::vector<transport::Bytes>& addresses, const transport::Bytes& secret = {});
  // The channel connect(addresses) would claim, the same at every member (-1: every one is
  // in use at some member, and connect would throw there; the caller can decide first).
  int freeChannel(const std::vector<transport::Bytes>& addresses) const;
  // A communicator over `members` (ranks of this one, in the new communicator's rank
  // order; this rank among them) on the same Links. Connected by its own connect().
  std::unique_ptr<Communicator> split(const std::vector<int>& members) const;
  // This communicator's rank r in the world (the Links' numbering).
  int worldRank(int r) const { return members_[r]; }

  // Collectives run in runtime/ (which validates and picks an algorithm); this class is
  // the state they run on.
  uint64_t nextSeq() { return ++seq_; }
  // The call about to run (after nextSeq), or what it continues as: published for the
  // stall inspector (a local store that peers mapping my control region read; see
  // comm/stall.cc); its hash marks every slot message until the next announce.
  void announce(const HashedDescriptor& hd) {
    current_ = hd.desc;
    callTag_ = static_cast<uint32_t>(hd.hash >> 56);
    word(ctrlLayout_.submitted(rank_)).store(hd.desc.seq, std::memory_order_relaxed);
  }
  // 8 bits of the running call's hash, carried by its slot messages (primitives.cc).
  uint32_t callTag() const { return callTag_; }
  const Descriptor& currentCall() const { return current_; }
  // The Chrome-trace timeline (RDMACOLL_TIMELINE), or nullptr when off.
  Timeline* timeline() const { return links_->timeline(); }
  void restartTimeline(const std::string& path) { links_->restartTimeline(path); }
  // Where the core's messages go (common/log.h); a sub-communicator shares its world's,
  // so its lines carry the world rank.
  const Log& log() const { return *log_; }
  // join (hvd.join(), comm/join.cc). markJoined: this rank entered join for the
  // `episode`th time (1, 2, ...): every peer learns it. awaitCall: wait until the first
  // message of the next call arrives from some peer (*theirs: its descriptor, and true;
  // the message stays for the call that reads it) or until every rank entered join
  // `episode` times (false). Between calls, on the thread that runs them.
  // markJoined returns the sequence number of the latest call (the same on every rank at
  // the same point of the job): where this rank joined.
  uint64_t markJoined(uint64_t episode);
  bool awaitCall(uint64_t episode, HashedDescriptor* theirs);
  // The next immediate of this communicator from peer p, if one arrived (comm/links.h).
  bool pollImmediate(const Peer& p, uint32_t* imm) { return links_->poll(p.link, channel_, imm); }
  uint32_t channel() const { return channel_; }
  // The interpreter's hooks (the binding's), for the engine's waits (runtime/async.h).
  const std::shared_ptr<WaitHooks>& hooks() const { return hooks_; }

  int rank() const { return rank_; }
  int size() const { return size_; }
  const Protocol& protocol() const { return protocol_; }
  const JobLayout& job() const { return job_; }
  const CtrlLayout& layout() const { return ctrlLayout_; }
  std::shared_ptr<MemoryPool> pool() const { return links_->pool(); }
  Peer& peer(int r) { return peers_[r]; }
  char* ctrl() const { return static_cast<char*>(ctrl_->data()); }
  std::atomic<uint64_t>& word(size_t off) const { return *reinterpret_cast<std::atomic<uint64_t>*>(ctrl() + off); }
  // Staging segments, max(2, size) of segmentBytes each: reads of peer memory land there,
  // and messages are built there to be sent (prim::sendStaging).
  void* staging(int i) const { return static_cast<char*>(staging_->data()) + i * protocol_.segmentBytes; }
  int stagingSegments() const { return std::max(2, size_); }
  // Which staging segment p lies in, or -1.
  int stagingIndexOf(const void* p) const {
    const char* b = static_cast<const char*>(staging_->data());
    const char* q = static_cast<const char*>(p);
    if (q < b || q >= b + stagingSegments() * protocol_.segmentBytes) return -1;
    return static_cast<int>((q - b) / protocol_.segmentBytes);
  }
  // Deferred completion (transport.h): the writes of the current call whose sources the
  // transport may still read, per peer (Peer::unwritten) and per staging segment sent
  // from (one entry per segment, made with them). comm/primitives.h keeps them
  // (prim::sendStaging, prim::finishWrites).
  struct StagedWrite {
    int peer = -1;
    uint64_t ticket = 0;
  };
  std::vector<int>& unwrittenPeers() { return unwrittenPeers_; }
  std::vector<StagedWrite>& stagedWrites() { return stagedWrites_; }
  int& nextSendStaging() { return nextSendStaging_; }
  bool peersReadable() const { return peersReadable_; }
  bool peersMappable() const { return peersMappable_; }
  bool oversubscribed() const { return oversubscribed_; }
  // The most local ranks per CPU of any host, at least 1: the cost model's scale.
  double ranksPerCpu() const { return job_.ranksPerCpu; }
  const char* transportName() const { return links_->device().name(); }
  // The backends behind the device (transport.h: Device::localBackend/networkBackend).
  std::string localBackend() const { return links_->device().localBackend(); }
  std::string networkBackend() const { return links_->device().networkBackend(); }
  // Where the network backend listens ("eth0 10.0.0.2:41321"), "" without one.
  std::string listenAddress() const { return links_->device().listenAddress(); }
  // Hosts, this rank's local and cross groups (job().hostOf, computed once).
  const schedule::Hierarchy& topology() const { return topology_; }
  // Units this rank completed in earlier calls (its progress counter at the peers).
  uint64_t progressBase() const { return progressBase_; }
  void advanceProgressBase(uint64_t units) { progressBase_ += units; }

  // Describe a user buffer for peers (pool memory is mappable; other memory is packed
  // for cross-memory access on transports where that is free, else not packable).
  bool describeBuffer(const void* p, size_t bytes, BufferRef* ref) const;

  // Wait until pred() holds. `peer` (or -1) and `what` name the wait in errors.
  template <class Pred>
  void waitUntil(Pred pred, int peer, const char* what) {
    if (pred()) return;
    checkAbortWord();
    WaitState s(*this, peer, what);
    while (!pred()) {
      // Announced asleep: check again before sleeping, so that an event that landed
      // before the announcement is not slept through (sleep() returns early only on
      // events after it; transport.h).
      if (!s.step()) continue;
      if (pred()) {
        s.cancelSleep();
        return;
      }
      s.sleep();
    }
  }

  [[noreturn]] void abortAll(AbortCode code, const std::string& message);
  // An error inside a collective: abort the peers unless an abort is already under way
  // (then only rethrow it).
  [[noreturn]] void fail(const std::string& message);
  // From another thread than the one running a call: this communicator's calls can no
  // longer be trusted (runtime/group.h: two threads inside synchronous calls at once). The
  // thread running a call raises `message` through fail() (every peer aborts) at its next
  // check, and so does the next call; the first report wins.
  void poison(const std::string& message);
  // Why this communicator can no longer be used, from any thread: 0 while it can, else the
  // AbortCode of the abort that ended it (this rank's own, or a peer's from the abort word).
  // A kMismatch leaves every rank alive, so the session can rebuild the world (rdmacoll.init).
  uint32_t failure() const {
    const uint32_t mine = brokenCode_.load(std::memory_order_acquire);
    if (mine != 0) return mine;
    return AbortWord::code(abortWord());
  }

  // Raises the report, if any, through fail(): from the thread running calls only.
  void checkPoison() {
    if (poisoned_.load(std::memory_order_acquire)) failPoisoned();
  }
  [[noreturn]] void failPoisoned();
  // Abort on every rank when this rank's device itself failed (Device::failure()).
  void checkDevice();
  // Calls that never wait long (a job that keeps running while its RDMA device is being
  // removed) still look at the device this often.
  static constexpr int kDeviceCheckMillis = 100;
  std::chrono::steady_clock::time_point nextDeviceCheck_{};
  // The abort word as it stands (0: no peer has aborted).
  uint64_t abortWord() const { return word(ctrlLayout_.abortFlag()).load(std::memory_order_acquire); }
  // Whether it holds an abort that ends the call this rank is in (AbortWord::ends).
  bool abortEndsCall() const { return AbortWord::ends(abortWord(), seq_); }
  // Raise a peer's abort that ends the call this rank is in: waits, errors and the end of
  // a call. A call about to begin raises every abort (beginCall).
  void checkAbortWord() const {
    const uint64_t flag = abortWord();
    if (AbortWord::ends(flag, seq_)) raisePeerAbort(flag);
  }
  // While a later call's mismatch is in the word (which call went on past): each aborting
  // rank's message slot keeps its own word, and one whose abort ends this call but whose
  // word was overwritten raises here (a wait's periodic checks).
  void checkAbortSlots() const;
  void checkUsable() const;
  // First thing of every collective: usable, and no peer has aborted.
  void beginCall();
  // Compare a peer's descriptor with mine; on a difference abort everyone with a message
  // naming both calls and both ranks.
  // shape: mine, named when the shapes differ
  void checkSetupMemory(int localSize) const;
  void checkDescriptor(const HashedDescriptor& mine, const HashedDescriptor& theirs, int peer,
                       const Shape* shape = nullptr);

 private:
  // A sub-communicator of `parent` (split).
  Communicator(const Communicator& parent, const std::vector<int>& members, int rank);
  // What both constructors share, once the Links exist.
  void setUp(int localSize);
  // One wait in progress: spin, then yield, then sleep on the device, with periodic
  // checks (abort word, peers alive, timeout, signals). See wait.cc.
  class WaitState {
   public:
    WaitState(Communicator& c, int peer, const char* what);
    ~WaitState();
    // Spin, yield, or (returning true) announce a sleep: the caller then re-checks its
    // condition and calls cancelSleep() or sleep().
    bool step();
    void cancelSleep();
    void sleep();

   private:
    void periodicChecks();
    void checkLiveness();
    void checkStall(double waited);
    Communicator& c_;
    int peer_;
    const char* what_;
    std::chrono::steady_clock::time_point start_, now_, nextCheck_;
    uint64_t iter_ = 0;
    uint64_t seen_ = 0;  // the device's event count when the sleep was announced
    bool released_ = false;
    void* interpreter_ = nullptr;  // releaseInterpreter's token while released_
    double nextStallReport_ = 0;   // seconds of this wait after which the inspector reports
    int earlyMillis_;              // the next early check's time into the wait (liveness alone)
    // Yield at once and sleep soon: the cores are oversubscribed, or this thread runs in
    // the background of a caller that computes (common/thread_role.h).
    bool patient_;
  };
  // Stall inspector (comm/stall.cc). Peers learn which call this rank has started
  // (pushed once per call, by a wait that lasted a check period).
  void publishSubmitted();
  // Last call each rank is known to have started (mine: seq_), with kLeftFlag once it
  // shut down (its communicator was destroyed: shutdown(), process exit).
  static constexpr uint64_t kLeftFlag = uint64_t(1) << 63;
  uint64_t submittedBy(int r) const;
  // Peers that left before the call this rank waits in: abort (they will never join).
  void checkPeersLeft(const char* what);
  // In the destructor: tell the peers this rank will start no further call.
  void announceLeaving();
  void inspectStall(double waited, const char* what, int waitingFor, bool warn);
  // Heartbeat: at most every kBeatPeriod of waiting (a wait that starts that long after
  // the last beat, and every check period of a long wait), this rank bumps its `waiting`
  // word (and pushes it to peers that cannot map it), and notes when each peer's changed.
  void beat();
  static constexpr std::chrono::milliseconds kBeatPeriod{100};
  // Ranks that started the current call but have not waited in it for kFrozenSeconds: a
  // process stopped or busy inside the call (SIGSTOP, a debugger), not waiting for anyone.
  std::vector<int> frozenRanks(double waited) const;
  std::string frozenText(const std::vector<int>& frozen) const;  // "" when none
  static constexpr double kFrozenSeconds = 1.0;
  uint64_t ownWordOf(int r, size_t at) const;
  void pushOwnWord(size_t at, uint64_t v);  // to the peers that cannot map my region
  // The abort of the rank that `flag` (an abort word) names, with its message.
  [[noreturn]] void raisePeerAbort(uint64_t flag) const;

  int rank_, size_, localSize_;
  Protocol protocol_;
  JobLayout job_;
  schedule::Hierarchy topology_;
  int pollMicros_ = 2000;  // device_->pollMicros(), read once
  bool oversubscribed_;
  std::shared_ptr<WaitHooks> hooks_;
  std::shared_ptr<const Log> log_;
  std::shared_ptr<Links> links_;
  std::vector<int> members_;  // world rank of each rank of this communicator
  bool world_;                // created the Links (else split from a communicator)
  uint32_t channel_ = 0;      // its immediates' channel (comm/links.h), once connected
  CtrlLayout ctrlLayout_;
  std::unique_ptr<transport::Memory> ctrl_;
  std::unique_ptr<transport::Memory> staging_;
  std::vector<Peer> peers_;
  std::vector<int> unwrittenPeers_;        // peers with Peer::unwritten set
  std::vector<StagedWrite> stagedWrites_;  // per staging segment: its last write
  int nextSendStaging_ = 0;                // the staging segment prim::sendStaging hands out next
  bool connected_ = false;
  bool claimed_ = false;        // channel_ is this communicator's on the links (from connect on)
  bool peersReadable_ = false;  // every peer endpoint can read or map peer memory
  bool peersMappable_ = false;  // every peer endpoint maps peer memory (same host)
  uint64_t seq_ = 0;
  uint64_t progressBase_ = 0;
  Descriptor current_{};                                          // the call started last (announce)
  uint32_t callTag_ = 0;                                          // its hash's top 8 bits
  uint64_t publishedSeq_ = 0;                                     // last seq pushed to the peers' submitted words
  uint64_t beats_ = 0;                                            // my heartbeat
  std::chrono::steady_clock::time_point lastBeat_{};              // when I last bumped it
  std::chrono::steady_clock::time_point contendedUntil_{};        // waits are patient until then (wait.cc)
  std::vector<uint64_t> beatSeen_;                                // each rank's, as last read
  std::vector<std::chrono::steady_clock::time_point> beatSince_;  // when it last changed
  mutable std::string broken_;                   // set once the communicator aborted: every later call raises it
  mutable std::atomic<uint32_t> brokenCode_{0};  // its AbortCode (failure())
  std::atomic<bool> poisoned_{false};
  std::mutex poisonMu_;  // guards poison_ (poison() runs on another thread)
  std::string poison_;
  pid_t pid_;
  uint64_t forkGeneration_;
};

}  // namespace rdmacoll
