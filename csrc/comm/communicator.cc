#include "comm/communicator.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/fork_guard.h"
#include "common/memory_limit.h"
#include "common/text.h"
#include "common/timeline.h"

namespace rdmacoll {

namespace {

// Setup's connections that did not prove the job's secret (Device::endSetup): one
// warning naming each (a stranger on the host or network, or a rank of another job).
void logTurnedAway(const Log& log, const std::vector<std::string>& lines) {
  if (lines.empty() || !log.enabled(LogLevel::kWarning)) return;
  constexpr size_t kNamed = 32;
  std::string text = std::to_string(lines.size()) + " connection" + (lines.size() == 1 ? "" : "s") +
                     " during setup did not prove this job's secret and were dropped: ";
  for (size_t i = 0; i < lines.size() && i < kNamed; ++i) text += (i ? "; " : "") + lines[i];
  if (lines.size() > kNamed) text += "; and " + std::to_string(lines.size() - kNamed) + " more";
  log.write(LogLevel::kWarning, text);
}

}  // namespace

Communicator::Communicator(int rank, int size, int localSize, const Protocol& protocol,
                           const transport::Options& options, const JobLayout& job, std::shared_ptr<WaitHooks> hooks,
                           std::shared_ptr<const Log> log)
    : rank_(rank),
      size_(size),
      localSize_(localSize),
      protocol_(protocol),
      job_(job),
      hooks_(hooks ? std::move(hooks) : std::make_shared<WaitHooks>()),
      log_(log ? std::move(log) : std::make_shared<const Log>(rank, LogLevel::kWarning, nullptr)),
      world_(true),
      ctrlLayout_(size, protocol),
      pid_(getpid()) {
  RC_CHECK(size >= 1 && rank >= 0 && rank < size,
           "invalid rank " + std::to_string(rank) + " for size " + std::to_string(size));
  if (job_.hostOf.empty()) job_.hostOf.assign(size, 0);  // a communicator of one host
  RC_CHECK(static_cast<int>(job_.hostOf.size()) == size, "hosts: expected one host index per rank");
  for (int r = 0; r < size; ++r) members_.push_back(r);
  links_ = std::make_shared<Links>(transport::createJobDevice(options, rank, job_.hostOf, job_.networkOffers), rank,
                                   size, protocol_.timelinePath, protocol_.poolFreeBytes);
  setUp(localSize);
}

Communicator::Communicator(const Communicator& parent, const std::vector<int>& members, int rank)
    : rank_(rank),
      size_(static_cast<int>(members.size())),
      protocol_(parent.protocol_),
      job_(parent.job_),
      hooks_(parent.hooks_),
      log_(parent.log_),
      links_(parent.links_),
      world_(false),
      ctrlLayout_(size_, parent.protocol_),
      pid_(getpid()) {
  job_.hostOf.clear();
  job_.networkOffers.clear();
  for (int m : members) {
    members_.push_back(parent.members_[m]);
    job_.hostOf.push_back(parent.job_.hostOf[m]);
  }
  int localSize = 0;
  for (int h : job_.hostOf) localSize += h == job_.hostOf[rank];
  setUp(localSize);
}

void Communicator::setUp(int localSize) {
  // Changes in every child after fork(): a communicator created before the fork belongs
  // to the parent (its peers, its memory); the child's copy must refuse to run. Cheaper
  // than getpid(), which is a system call on every collective. The child has already
  // closed the core's descriptors (common/fork_guard.h).
  forkGeneration_ = forkguard::generation();
  localSize_ = localSize;
  // The ranks of this host share job.localCpus CPUs (the union of their affinity masks,
  // gathered by bootstrap): one rank's own mask says nothing about that (ranks bound to
  // one core each see one CPU and are not oversubscribed).
  oversubscribed_ = job_.localCpus > 0 && localSize > job_.localCpus;
  topology_ = schedule::hierarchy(job_.hostOf, rank_);
  transport::Device& device = links_->device();
  pollMicros_ = device.pollMicros();
  checkSetupMemory(localSize);
  ctrl_ = device.allocate(ctrlLayout_.total());
  staging_ = device.allocate(stagingSegments() * protocol_.segmentBytes);
  stagedWrites_.assign(static_cast<size_t>(stagingSegments()), StagedWrite{});
  peers_.resize(size_);
}

// What setup allocates follows from the settings (RDMACOLL_EAGER_BYTES, SLOT_BYTES,
// SLOTS, SEGMENT_BYTES: each within its own range, but together maybe more than the
// machine has): checked before anything is faulted in, for all the ranks of this host
// (they allocate alike, at once), as an error naming the settings.
void Communicator::checkSetupMemory(int localSize) const {
  const long double staging = static_cast<long double>(std::max(2, size_)) * protocol_.segmentBytes;
  const long double perRank = static_cast<long double>(ctrlLayout_.total()) + staging;
  const long double host = perRank * std::max(1, localSize);
  if (host < kHeadroomCheckBytes) return;
  const MemoryHeadroom h = memoryHeadroom();
  if (host <= static_cast<long double>(h.bytes)) return;
  auto text = [](long double b) { return bytesText(static_cast<size_t>(std::min<long double>(b, 1e19L))); };
  throw ArgumentError(
      "the settings need " + text(perRank) + " per rank at init(), " + text(host) + " for the " +
      std::to_string(localSize) + " ranks of this host, more than this process can get (" + bytesText(h.bytes) + ", " +
      h.limitedBy + "): each peer's inbox holds 2 x RDMACOLL_EAGER_BYTES (" + std::to_string(protocol_.eagerBytes) +
      ") and RDMACOLL_SLOTS x RDMACOLL_SLOT_BYTES (" + std::to_string(protocol_.slots) + " x " +
      std::to_string(protocol_.slotBytes) + "), and staging takes " + std::to_string(std::max(2, size_)) +
      " x RDMACOLL_SEGMENT_BYTES (" + std::to_string(protocol_.segmentBytes) + "): lower them");
}

Communicator::~Communicator() {
  // (Not in a forked child: its copy belongs to the parent, which has not left.)
  if (connected_ && forkguard::generation() == forkGeneration_) announceLeaving();
  // The world's links live on when a communicator split from it still uses them (the next
  // world of an elastic job, shrunk in place): its peers may still write into its memory,
  // as a sub-communicator's may. One that leaves them after it failed (in its connect,
  // too: the others may have connected), or the world, may also still be sent
  // immediates: its channel is burned, not released (links.h).
  const bool linksLiveOn = !world_ || links_.use_count() > 1;
  if (claimed_ && linksLiveOn && (world_ || !connected_ || failure() != 0)) {
    links_->burn(channel_);
  } else if (claimed_) {
    links_->release(channel_);
  }
  if (linksLiveOn) {
    links_->retire(std::move(ctrl_));
    links_->retire(std::move(staging_));
  }
  peers_.clear();
}

std::unique_ptr<Communicator> Communicator::split(const std::vector<int>& members) const {
  int me = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    RC_CHECK(members[i] >= 0 && members[i] < size_, "split: rank " + std::to_string(members[i]) +
                                                        " is not a rank of this communicator (size " +
                                                        std::to_string(size_) + ")");
    for (size_t k = 0; k < i; ++k)
      RC_CHECK(members[k] != members[i], "split: rank " + std::to_string(members[i]) + " is listed twice");
    if (members[i] == rank_) me = static_cast<int>(i);
  }
  RC_CHECK(me >= 0, "split: this rank (" + std::to_string(rank_) + ") is not among the members");
  return std::unique_ptr<Communicator>(new Communicator(*this, members, me));
}

transport::Bytes Communicator::address() const {
  transport::Bytes a = world_ ? links_->device().address() : transport::Bytes();
  transport::PackedMemory pm;
  ctrl_->pack(&pm);
  a.insert(a.end(), pm.bytes, pm.bytes + sizeof(pm.bytes));
  if (!world_) {
    const uint64_t used = links_->channelsInUse();
    const uint8_t* u = reinterpret_cast<const uint8_t*>(&used);
    a.insert(a.end(), u, u + sizeof(used));
  }
  return a;
}

int Communicator::freeChannel(const std::vector<transport::Bytes>& addresses) const {
  RC_CHECK(static_cast<int>(addresses.size()) == size_,
           "expected " + std::to_string(size_) + " addresses, got " + std::to_string(addresses.size()));
  // A sub-communicator's address ends with the channels in use at that member: its
  // channel is the lowest free at every member.
  const size_t tail = world_ ? 0 : sizeof(uint64_t);
  uint64_t used = 0;
  for (int r = 0; r < size_; ++r) {
    const transport::Bytes& a = addresses[r];
    RC_CHECK(a.size() >= transport::PackedMemory::kBytes + tail + (world_ && r != rank_ ? 1 : 0),
             "malformed address from rank " + std::to_string(r));
    if (tail) {
      uint64_t u;
      std::memcpy(&u, a.data() + a.size() - tail, tail);
      used |= u;
    }
  }
  int channel = 0;
  while (channel < Links::kChannels && (used >> channel & 1)) ++channel;
  return channel < Links::kChannels ? channel : -1;
}

void Communicator::connect(const std::vector<transport::Bytes>& addresses, const transport::Bytes& secret) {
  RC_CHECK(!connected_, "communicator already connected");
  const int free = freeChannel(addresses);
  const uint32_t channel = free < 0 ? Links::kChannels : static_cast<uint32_t>(free);
  const size_t tail = world_ ? 0 : sizeof(uint64_t);
  links_->claim(channel);
  channel_ = channel;
  claimed_ = true;
  peersReadable_ = true;
  peersMappable_ = true;
  if (world_) links_->device().beginSetup(secret);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const transport::Bytes& a = addresses[r];
    const size_t ctrlAt = a.size() - tail - transport::PackedMemory::kBytes;
    transport::PackedMemory pm;
    std::memcpy(pm.bytes, a.data() + ctrlAt, sizeof(pm.bytes));
    Peer& p = peers_[r];
    p.rank = r;
    p.link = members_[r];
    if (world_) links_->connect(p.link, transport::Bytes(a.begin(), a.begin() + ctrlAt));
    p.ep = links_->endpoint(p.link);
    RC_CHECK(p.ep, "rank " + std::to_string(r) + " has no connection");
    p.ep->unpack(pm, &p.ctrl);
    p.ep->map(&p.ctrl);  // where the transport maps, writes then skip the mapping lookup
    RC_CHECK(p.ctrl.len == ctrlLayout_.total(), "rank " + std::to_string(r) +
                                                    " has a different control layout: the ranks run "
                                                    "different rdmacoll versions or settings");
    uint32_t caps = p.ep->capabilities();
    if (!(caps & transport::kCanRead) && !(caps & transport::kCanMap)) peersReadable_ = false;
    if (!(caps & transport::kCanMap)) peersMappable_ = false;
  }
  if (world_) logTurnedAway(*log_, links_->device().endSetup());
  // Reading user memory in place needs per-call registration to be free (shm).
  if (!links_->device().cheapRegistration()) peersReadable_ = peersMappable_ = false;
  connected_ = true;
}

bool Communicator::describeBuffer(const void* p, size_t bytes, BufferRef* ref) const {
  ref->ptr = p;
  ref->bytes = bytes;
  if (const MemoryPool::Block* b = links_->pool()->find(p, bytes)) {
    b->mem->pack(&ref->packed);
    ref->allocated = true;
    ref->offset = static_cast<const char*>(p) - static_cast<const char*>(b->mem->data());
    return true;
  }
  ref->allocated = false;
  ref->offset = 0;
  if (!links_->device().cheapRegistration()) return false;
  links_->device().packUser(p, bytes, &ref->packed);
  return true;
}

void Communicator::checkUsable() const {
  if (forkguard::generation() != forkGeneration_) {
    throw Error("this rdmacoll communicator belongs to the parent process (pid " + std::to_string(pid_) +
                "); a forked child cannot use it");
  }
  RC_CHECK(connected_, "rdmacoll is not initialised: call rdmacoll.init() first");
  if (!broken_.empty()) throw Error(broken_);
}

void Communicator::poison(const std::string& message) {
  std::lock_guard<std::mutex> lk(poisonMu_);
  if (poisoned_.load(std::memory_order_relaxed)) return;
  poison_ = message;
  poisoned_.store(true, std::memory_order_release);
}

void Communicator::failPoisoned() {
  std::string message;
  {
    std::lock_guard<std::mutex> lk(poisonMu_);
    message = poison_;
  }
  fail(message);
}

void Communicator::beginCall() {
  checkUsable();
  checkPoison();
  // A peer that gave up (error, interrupt, death it noticed) may have left the previous
  // call after sending what this call's first wait needs: without this check the call
  // would go on to touch memory that peer abandoned. Every abort, of whatever call
  // (AbortWord::ends spares only a call already under way).
  const uint64_t flag = abortWord();
  if (flag != 0) raisePeerAbort(flag);
  const auto now = std::chrono::steady_clock::now();
  if (now >= nextDeviceCheck_) {
    nextDeviceCheck_ = now + std::chrono::milliseconds(kDeviceCheckMillis);
    checkDevice();
  }
}

const char* abortCodeName(uint32_t code) {
  switch (static_cast<AbortCode>(code)) {
    case AbortCode::kMismatch:
      return "mismatch";
    case AbortCode::kPeerDied:
      return "peer died";
    case AbortCode::kInterrupted:
      return "interrupted";
    case AbortCode::kTimeout:
      return "timeout";
    case AbortCode::kError:
      return "error";
    case AbortCode::kStall:
      return "stall";
    case AbortCode::kPeerLeft:
      return "peer left";
  }
  return "";
}

void Communicator::abortAll(AbortCode code, const std::string& message) {
  // A peer's abort already here, one this call went on past (AbortWord::ends), came
  // first: every rank records that one (its code decides whether init() rebuilds, and the
  // ranks must agree), and this rank's failure is likely its symptom (the ranks that found
  // a mismatch may have closed their connections)
  const uint64_t pending = abortWord();
  if (broken_.empty() && pending != 0) raisePeerAbort(pending);
  if (broken_.empty()) {
    broken_ = message;
    brokenCode_.store(static_cast<uint32_t>(code), std::memory_order_release);
  }
  // The slot holds the word too: a later abort's word may overwrite this one's at a peer
  // (checkAbortSlots)
  char msg[kAbortMessageBytes] = {};
  const uint64_t flag = AbortWord::pack(code, rank_, seq_);
  std::memcpy(msg, &flag, sizeof(flag));
  std::strncpy(msg + sizeof(flag), message.c_str(), sizeof(msg) - sizeof(flag) - 1);
  for (Peer& p : peers_) {
    if (!p.ep) continue;
    try {
      p.ep->write(msg, p.ctrl, ctrlLayout_.abortMessage(rank_), sizeof(msg), false, 0);
      p.ep->put64(p.ctrl, ctrlLayout_.abortFlag(), flag);
    } catch (const Error&) {
      // A dead peer cannot be told; the others still are.
    }
  }
  throw Error(broken_);
}

void Communicator::checkDevice() {
  const std::string why = links_->device().failure();
  if (!why.empty()) abortAll(AbortCode::kError, "rank " + std::to_string(rank_) + ": " + why);
}

void Communicator::fail(const std::string& message) {
  if (!broken_.empty()) throw Error(broken_);
  checkAbortWord();         // a peer's abort is the cause; this error is its symptom
  checkDevice();            // so is a device that went away under this rank
  for (Peer& p : peers_) {  // so is a dead peer (e.g. ESRCH from a cross-memory read)
    if (p.ep && !p.ep->alive()) {
      abortAll(AbortCode::kPeerDied, "rank " + std::to_string(p.rank) + " (" + p.ep->describe() +
                                         ") died; detected by rank " + std::to_string(rank_) + ": " + message);
    }
  }
  abortAll(AbortCode::kError, "rank " + std::to_string(rank_) + ": " + message);
}

void Communicator::raisePeerAbort(uint64_t flag) const {
  int src = AbortWord::rank(flag);
  if (src < 0 || src >= size_) src = 0;
  char msg[kAbortMessageBytes];
  std::memcpy(msg, ctrl() + ctrlLayout_.abortMessage(src), sizeof(msg));
  if (broken_.empty()) {
    broken_ = printableUtf8(msg + sizeof(uint64_t), sizeof(msg) - sizeof(uint64_t)) + " (reported by rank " +
              std::to_string(src) + ")";
    brokenCode_.store(AbortWord::code(flag), std::memory_order_release);
  }
  throw Error(broken_);
}

void Communicator::checkAbortSlots() const {
  if (abortWord() == 0) return;
  for (int r = 0; r < size_; ++r) {
    const uint64_t w = word(ctrlLayout_.abortMessage(r)).load(std::memory_order_acquire);
    if (AbortWord::rank(w) == r && AbortWord::ends(w, seq_)) raisePeerAbort(w);
  }
}

void Communicator::checkDescriptor(const HashedDescriptor& mine, const HashedDescriptor& theirs, int peer,
                                   const Shape* shape) {
  if (mine.hash == theirs.hash) return;
  const Descriptor& a = mine.desc;
  const Descriptor& b = theirs.desc;
  std::string what;
  if (a.collective != b.collective)
    what = "different collectives";
  else if (a.count != b.count)
    what = "different counts";
  else if (a.dtype != b.dtype)
    what = "different dtypes";
  else if (a.op != b.op)
    what = "different ops";
  else if (a.shapeHash != b.shapeHash)
    what = "different shapes";
  else if (a.root != b.root)
    what = "different root ranks";
  else if (a.nameHash != b.nameHash)
    what = "different names";
  else if (a.seq != b.seq)
    what = "calls out of order";
  else if (a.algorithm != b.algorithm)
    what = "different algorithms (RDMACOLL_ALGO differs?)";
  else
    what = "different settings";
  // (a peer's shape is known by its hash only: the rank that finds the mismatch names its own)
  const bool shapes = a.shapeHash != b.shapeHash && what == "different shapes" && shape != nullptr;
  abortAll(AbortCode::kMismatch, "collective mismatch (" + what + "): rank " + std::to_string(rank_) + " called " +
                                     describeCall(a) + (shapes ? describeShape(*shape) : std::string()) + " but rank " +
                                     std::to_string(peer) + " called " + describeCall(b) +
                                     (shapes ? " with another shape" : ""));
}

}  // namespace rdmacoll
