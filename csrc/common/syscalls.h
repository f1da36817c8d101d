#pragma once
// System calls newer than the oldest glibc a release wheel targets (manylinux2014: glibc
// 2.17, scripts/build_wheels.sh), made through syscall(2) so that the same source builds
// against any glibc. The newest is pidfd_open (Linux 5.3), so the shm transport needs Linux
// 5.3 or newer (docs/install.md); an older kernel answers ENOSYS, which the callers report as
// the failed call it is.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>

#ifndef MFD_CLOEXEC  // glibc declares it from 2.27 on
#define MFD_CLOEXEC 0x0001U
#endif

namespace rdmacoll {
namespace sys {

// memfd_create(2): an anonymous file that a peer opens through /proc/<pid>/fd/<n>.
inline int memfdCreate(const char* name, unsigned flags) {
  return static_cast<int>(::syscall(SYS_memfd_create, name, flags));
}

// getrandom(2) with flags 0: blocks until the kernel's pool is seeded, then never fails
// short of EINTR for requests up to 256 bytes.
inline long getRandom(void* buf, size_t n) { return ::syscall(SYS_getrandom, buf, n, 0); }

// pidfd_open(2) (Linux 5.3): a descriptor that polls readable once the process has exited.
inline int pidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace sys
}  // namespace rdmacoll
