// Descriptors a forked child must not keep (fork() after init(): DataLoader workers).
//
// Linux has no close-on-fork flag. A child that kept a copy of a socket would keep the
// connection open after its parent died, and the parent's peers would never see EOF; a
// memfd or pidfd copy keeps kernel objects alive for nothing. Every descriptor the core
// opens for its lifetime is tracked here; a pthread_atfork child handler closes them all
// in the child, and release() closes a descriptor only if this process still owns it
// (in the child the number may already belong to something else).
//
// generation() changes in every child: a communicator created in an earlier generation
// belongs to the parent and refuses to run (Communicator::checkUsable).
//
// Process-wide by nature (fork is): one registry, guarded by a mutex that the fork
// handlers hold across fork() so that the child never inherits it locked.
#pragma once
#include <cstdint>

namespace rdmacoll {
namespace forkguard {

// Remember fd as the core's; returns fd.
int track(int fd);
// Close fd if this process tracks it (forget it either way); -1 is ignored.
void release(int fd);
// Bumped in the child by every fork() since the process started.
uint64_t generation();
// Tracked descriptors (tests).
int trackedCount();

}  // namespace forkguard
}  // namespace rdmacoll
