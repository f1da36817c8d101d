#include "transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/error.h"
#include "common/fork_guard.h"
#include "common/syscalls.h"
#include "common/text.h"

namespace rdmacoll {
namespace transport {
namespace shm {

namespace {
constexpr size_t kHugePageAdviceBytes = 4 << 20;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

std::string memfdName(pid_t pid, uint64_t id) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "rdmacoll.%d.%llu", static_cast<int>(pid), static_cast<unsigned long long>(id));
  return buf;
}
}  // namespace

Segment Segment::create(size_t len, uint64_t id) {
  Segment s;
  std::string name = memfdName(getpid(), id);
  s.fd_ = forkguard::track(sys::memfdCreate(name.c_str(), MFD_CLOEXEC));
  if (s.fd_ < 0) throw Error(sysError("memfd_create", errno));
  s.id_ = id;
  s.len_ = len;
  if (len == 0) return s;
  if (ftruncate(s.fd_, static_cast<off_t>(len)) != 0) {
    throw Error(sysError("ftruncate of a " + std::to_string(len) + "-byte segment", errno));
  }
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd_, 0);
  if (p == MAP_FAILED) throw Error(sysError("mmap of " + std::to_string(len) + " bytes", errno));
  s.ptr_ = p;
  // Large segments ask for transparent huge pages before the first fault: a 16 MiB
  // buffer is 4096 small pages, more than the TLB holds. Takes effect where the admin
  // allows it for shared memory (/sys/kernel/mm/transparent_hugepage/shmem_enabled =
  // advise or within_size); elsewhere the advice is ignored.
  if (len >= kHugePageAdviceBytes) madvise(p, len, MADV_HUGEPAGE);
  // Pre-fault now, so the hot path never takes a page fault.
  if (madvise(p, len, MADV_POPULATE_WRITE) != 0) {
    const long page = sysconf(_SC_PAGESIZE);
    volatile char* c = static_cast<volatile char*>(p);
    for (size_t off = 0; off < len; off += static_cast<size_t>(page)) c[off] = 0;
  }
  return s;
}

Segment Segment::openPeer(pid_t pid, int fd, uint64_t id, size_t len) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", static_cast<int>(pid), fd);
  // The fd number is only meaningful together with the name we gave the memfd.
  char target[256];
  ssize_t n = readlink(path, target, sizeof(target) - 1);
  if (n < 0) throw Error(sysError(std::string("shm: cannot reach peer memory ") + path, errno));
  target[n] = 0;
  std::string expect = "/memfd:" + memfdName(pid, id);
  if (std::strncmp(target, expect.c_str(), expect.size()) != 0) {
    throw Error(std::string("shm: ") + path + " is '" + printableUtf8(target, sizeof(target)) + "', expected " +
                expect);
  }
  Segment s;
  s.fd_ = forkguard::track(open(path, O_RDWR | O_CLOEXEC));
  if (s.fd_ < 0) throw Error(sysError(std::string("shm: open ") + path, errno));
  struct stat st;
  if (fstat(s.fd_, &st) != 0 || static_cast<size_t>(st.st_size) < len) {
    throw Error(std::string("shm: peer segment ") + path + " is smaller than announced");
  }
  s.id_ = id;
  s.len_ = len;
  if (len > 0) {
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd_, 0);
    if (p == MAP_FAILED) throw Error(sysError("shm: mmap of peer segment", errno));
    s.ptr_ = p;
  }
  forkguard::release(s.fd_);  // the mapping keeps the memory; we never need the peer's fd again
  s.fd_ = -1;
  return s;
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    this->~Segment();
    ptr_ = o.ptr_;
    len_ = o.len_;
    fd_ = o.fd_;
    id_ = o.id_;
    o.ptr_ = nullptr;
    o.len_ = 0;
    o.fd_ = -1;
  }
  return *this;
}

Segment::~Segment() {
  if (ptr_ != nullptr) munmap(ptr_, len_);
  forkguard::release(fd_);  // (after a fork the child closed it already)
  ptr_ = nullptr;
  fd_ = -1;
}

}  // namespace shm
}  // namespace transport
}  // namespace rdmacoll
