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
#include "common/text.h"
#include "common/timeline.h"

namespace rdmacoll {

Communicator::Communicator(int rank, int size, int localSize, const Protocol& protocol,
                           const transport::Options& options, const JobLayout& job, std::shared_ptr<WaitHooks> hooks)
    : rank_(rank), size_(size), localSize_(localSize), protocol_(protocol), job_(job),
      hooks_(hooks ? std::move(hooks) : std::make_shared<WaitHooks>()),
      ctrlLayout_(size, protocol), pid_(getpid()) {
  // Changes in every child after fork(): a communicator created before the fork belongs
  // to the parent (its peers, its memory); the child's copy must refuse to run. Cheaper
  // than getpid(), which is a system call on every collective. The child has already
  // closed the core's descriptors (common/fork_guard.h).
  forkGeneration_ = forkguard::generation();
  RC_CHECK(size >= 1 && rank >= 0 && rank < size, "invalid rank " + std::to_string(rank) +
                                                       " for size " + std::to_string(size));
  // The ranks of this host share job.localCpus CPUs (the union of their affinity masks,
  // gathered by bootstrap): one rank's own mask says nothing about that (ranks bound to
  // one core each see one CPU and are not oversubscribed).
  oversubscribed_ = job.localCpus > 0 && localSize > job.localCpus;
  if (job_.hostOf.empty()) job_.hostOf.assign(size, 0);  // a communicator of one host
  RC_CHECK(static_cast<int>(job_.hostOf.size()) == size, "hosts: expected one host index per rank");
  topology_ = schedule::hierarchy(job_.hostOf, rank);
  device_ = transport::createJobDevice(options, rank, job_.hostOf, job_.networkOffers);
  pollMicros_ = device_->pollMicros();
  pool_ = std::make_shared<MemoryPool>(device_.get());
  ctrl_ = device_->allocate(ctrlLayout_.total());
  staging_ = device_->allocate(std::max(2, size) * protocol_.segmentBytes);
  peers_.resize(size);
  if (!protocol_.timelinePath.empty()) timeline_ = Timeline::open(protocol_.timelinePath, rank);
}

Communicator::~Communicator() {
  // (Not in a forked child: its copy belongs to the parent, which has not left.)
  if (connected_ && forkguard::generation() == forkGeneration_) announceLeaving();
  timeline_.reset();
  peers_.clear();
  pool_->detach();
}

transport::Bytes Communicator::address() const {
  transport::Bytes a = device_->address();
  transport::PackedMemory pm;
  ctrl_->pack(&pm);
  a.insert(a.end(), pm.bytes, pm.bytes + sizeof(pm.bytes));
  return a;
}

void Communicator::connect(const std::vector<transport::Bytes>& addresses) {
  RC_CHECK(!connected_, "communicator already connected");
  RC_CHECK(static_cast<int>(addresses.size()) == size_,
           "expected " + std::to_string(size_) + " addresses, got " + std::to_string(addresses.size()));
  peersReadable_ = true;
  peersMappable_ = true;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const transport::Bytes& a = addresses[r];
    RC_CHECK(a.size() > transport::PackedMemory::kBytes,
             "malformed address from rank " + std::to_string(r));
    transport::Bytes dev(a.begin(), a.end() - transport::PackedMemory::kBytes);
    transport::PackedMemory pm;
    std::memcpy(pm.bytes, a.data() + dev.size(), sizeof(pm.bytes));
    Peer& p = peers_[r];
    p.rank = r;
    p.ep = device_->connect(r, dev);
    p.ep->unpack(pm, &p.ctrl);
    p.ep->map(&p.ctrl);  // where the transport maps, writes then skip the mapping lookup
    RC_CHECK(p.ctrl.len == ctrlLayout_.total(),
             "rank " + std::to_string(r) + " has a different control layout: the ranks run "
             "different rdmacoll versions or settings");
    uint32_t caps = p.ep->capabilities();
    if (!(caps & transport::kCanRead) && !(caps & transport::kCanMap)) peersReadable_ = false;
    if (!(caps & transport::kCanMap)) peersMappable_ = false;
  }
  // Reading user memory in place needs per-call registration to be free (shm).
  if (!device_->cheapRegistration()) peersReadable_ = peersMappable_ = false;
  connected_ = true;
}

bool Communicator::describeBuffer(const void* p, size_t bytes, BufferRef* ref) const {
  ref->ptr = p;
  ref->bytes = bytes;
  if (const MemoryPool::Block* b = pool_->find(p, bytes)) {
    b->mem->pack(&ref->packed);
    ref->allocated = true;
    ref->offset = static_cast<const char*>(p) - static_cast<const char*>(b->mem->data());
    return true;
  }
  ref->allocated = false;
  ref->offset = 0;
  if (!device_->cheapRegistration()) return false;
  device_->packUser(p, bytes, &ref->packed);
  return true;
}

void Communicator::checkUsable() const {
  if (forkguard::generation() != forkGeneration_) {
    throw Error("this rdmacoll communicator belongs to the parent process (pid " +
                std::to_string(pid_) + "); a forked child cannot use it");
  }
  RC_CHECK(connected_, "rdmacoll is not initialised: call rdmacoll.init() first");
  if (!broken_.empty()) throw Error(broken_);
}

void Communicator::beginCall() {
  checkUsable();
  // A peer that gave up (error, interrupt, death it noticed) may have left the previous
  // call after sending what this call's first wait needs: without this check the call
  // would go on to touch memory that peer abandoned.
  checkAbortWord();
}

void Communicator::abortAll(AbortCode code, const std::string& message) {
  if (broken_.empty()) broken_ = message;
  char msg[kAbortMessageBytes] = {};
  std::strncpy(msg, message.c_str(), sizeof(msg) - 1);
  uint64_t flag = (static_cast<uint64_t>(code) << 32) | static_cast<uint64_t>(rank_ + 1);
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

void Communicator::fail(const std::string& message) {
  if (!broken_.empty()) throw Error(broken_);
  checkAbortWord();  // a peer's abort is the cause; this error is its symptom
  for (Peer& p : peers_) {  // so is a dead peer (e.g. ESRCH from a cross-memory read)
    if (p.ep && !p.ep->alive()) {
      abortAll(AbortCode::kPeerDied, "rank " + std::to_string(p.rank) + " (" + p.ep->describe() +
                                         ") died; detected by rank " + std::to_string(rank_) + ": " + message);
    }
  }
  abortAll(AbortCode::kError, "rank " + std::to_string(rank_) + ": " + message);
}

void Communicator::raisePeerAbort() const {
  uint64_t flag = word(ctrlLayout_.abortFlag()).load(std::memory_order_acquire);
  int src = static_cast<int>(flag & 0xffffffffu) - 1;
  if (src < 0 || src >= size_) src = 0;
  char msg[kAbortMessageBytes];
  std::memcpy(msg, ctrl() + ctrlLayout_.abortMessage(src), sizeof(msg));
  if (broken_.empty()) broken_ = printableUtf8(msg, sizeof(msg)) + " (reported by rank " + std::to_string(src) + ")";
  throw Error(broken_);
}

void Communicator::checkDescriptor(const HashedDescriptor& mine, const HashedDescriptor& theirs,
                                   int peer) {
  if (mine.hash == theirs.hash) return;
  const Descriptor& a = mine.desc;
  const Descriptor& b = theirs.desc;
  std::string what;
  if (a.collective != b.collective) what = "different collectives";
  else if (a.count != b.count) what = "different counts";
  else if (a.dtype != b.dtype) what = "different dtypes";
  else if (a.op != b.op) what = "different ops";
  else if (a.root != b.root) what = "different root ranks";
  else if (a.nameHash != b.nameHash) what = "different names";
  else if (a.seq != b.seq) what = "calls out of order";
  else if (a.algorithm != b.algorithm) what = "different algorithms (RDMACOLL_ALGO differs?)";
  else what = "different settings";
  abortAll(AbortCode::kMismatch,
           "collective mismatch (" + what + "): rank " + std::to_string(rank_) + " called " +
               describeCall(a) + " but rank " + std::to_string(peer) + " called " + describeCall(b));
}

}  // namespace rdmacoll
