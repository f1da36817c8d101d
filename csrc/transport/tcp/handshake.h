// The tcp transport's connection handshake: every connection proves the job's secret
// before anything else on it is read, and setup serves every connection at once.
//
// The secret: random bytes rank 0 creates at each bootstrap and sends to every rank
// through the bootstrap's own channel (MPI, torch's store); it never goes on a transport
// connection. For each pair of ranks the lower one connects to the higher one's listener:
//
//   connector -> listener   Hello  {from, to, size, the listener's address nonce, the
//                                   connector's, a fresh 16-byte challenge Cc}
//   listener  -> connector  Reply  {a fresh challenge Cl, HMAC(secret, "listener" Hello Cl)}
//   connector -> listener   Proof  {HMAC(secret, "connector" Hello Cl)}
//   listener  -> connector  Ack
//
// Each side checks the other's HMAC-SHA256 (common/sha256.h): a process without the secret
// cannot pass as a rank of the job in either role; both challenges are fresh, so bytes
// recorded from a real handshake fail when replayed; the role names keep one side's proof
// from serving as the other's. A hello that names another rank, job size or device (an
// earlier init's address) is refused before any proof is computed.
//
// The listener (Acceptor) serves every connection in progress at once, each with its own
// deadline: strangers' connections, idle or sending garbage, are dropped when they fail
// or their deadline passes, and never delay a real peer. What it dropped, and why, is
// kept for the log. Setup ends with the listener closed (TcpDevice::endSetup).
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transport/tcp/socket.h"
#include "transport/transport.h"

namespace rdmacoll {
namespace transport {
namespace tcp {

// Who this side of a handshake is: rank, job size, this device's address nonce, the secret.
struct HandshakeIdentity {
  int rank = 0, size = 0;
  uint64_t nonce = 0;
  Bytes secret;
};

// How long one incoming connection may take to prove itself (a real peer takes
// milliseconds: it sends each message as soon as it can).
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
// Incoming connections in handshake at once; past this the oldest stranger's (no valid
// hello yet) is dropped.
constexpr size_t kMaxHandshakes = 256;

// The connector's side, on a connected blocking socket `fd` to rank `peer` (whose address
// nonce is peerNonce) at `where`. Throws Error saying what failed: no answer by
// `deadline`, an answer without the secret's proof, or the peer refusing ours.
void connectorHandshake(int fd, const HandshakeIdentity& me, int peer, uint64_t peerNonce, const std::string& where,
                        Clock::time_point deadline);

// The listener's side: accepts on listenFd and runs every handshake in progress at once.
class Acceptor {
 public:
  explicit Acceptor(HandshakeIdentity me);
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  // Serve until rank `peer` has proved itself from the device whose address nonce is
  // peerNonce; returns its connection (the caller owns it), or -1 at the deadline.
  int waitFor(int listenFd, int peer, uint64_t peerNonce, Clock::time_point deadline);
  const HandshakeIdentity& identity() const { return me_; }
  // Connections dropped so far: "10.0.0.5:51234: <why>", in order.
  const std::vector<std::string>& dropped() const { return dropped_; }
  // Take the connections waiting on listenFd (setup is ending: each is then dropped by
  // closeAll, and so logged, rather than reset unseen when the listener closes).
  void takeWaiting(int listenFd) { accept(listenFd); }
  // Close every connection still in handshake, or proved and not claimed, as dropped.
  void closeAll();

 private:
  struct Handshake;
  struct Proved {
    int fd;
    uint64_t nonce;  // the connector's address nonce
    std::string from;
  };
  void accept(int listenFd);
  Handshake* oldestStranger() const;  // the oldest without a valid hello; null if none
  // Read what arrived and answer; false when the connection is finished (proved: moved to
  // proved_; or dropped).
  bool advance(Handshake& h);
  void drop(Handshake& h, const std::string& why);

  HandshakeIdentity me_;
  std::vector<std::unique_ptr<Handshake>> active_;  // oldest first
  std::map<int, Proved> proved_;                    // by rank
  std::vector<std::string> dropped_;
};

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
