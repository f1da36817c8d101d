// Descriptors a forked child must not keep (DESIGN.md: fork() after init()). A child of
// fork() (a DataLoader worker) inherits the parent's sockets; if it kept them open, the
// parent's death would send no EOF to its peers. The child closes every descriptor
// registered here at fork time (pthread_atfork); its copies of the objects that owned
// them then refuse to run (the Communicator's fork check) and close nothing.
//
// Process-wide by necessity: pthread_atfork handlers take no argument.
#pragma once

namespace rdmacoll {
namespace transport {
namespace tcp {

void forkGuardAdd(int fd);
void forkGuardRemove(int fd);

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
