// A memfd-backed shared segment: no file name exists anywhere, so nothing is left behind
// after any exit (kill -9 included). Peers open it through /proc/<pid>/fd/<fd>, which
// needs the same ptrace access as cross-memory attach (same user, no Yama restriction).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace rdmacoll {
namespace transport {
namespace shm {

class Segment {
 public:
  // Create, size and map a new segment, pre-faulted (MAP_POPULATE) and zero-filled.
  // The memfd is named "rdmacoll.<pid>.<id>" so that a peer can verify what it opened.
  static Segment create(size_t len, uint64_t id);
  // Map a peer's segment. Verifies the name and size before mapping; throws Error.
  static Segment openPeer(pid_t pid, int fd, uint64_t id, size_t len);

  Segment() = default;
  Segment(Segment&& o) noexcept { *this = static_cast<Segment&&>(o); }
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  void* data() const { return ptr_; }
  size_t size() const { return len_; }
  int fd() const { return fd_; }
  uint64_t id() const { return id_; }

 private:
  void* ptr_ = nullptr;
  size_t len_ = 0;
  int fd_ = -1;  // own segments keep their fd open (peers open it); peer mappings close it
  uint64_t id_ = 0;
};

}  // namespace shm
}  // namespace transport
}  // namespace rdmacoll
