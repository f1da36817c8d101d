#include "transport/tcp/fork_guard.h"

#include <pthread.h>
#include <unistd.h>

#include <mutex>
#include <set>

namespace rdmacoll {
namespace transport {
namespace tcp {

namespace {

struct Guard {
  std::mutex mu;
  std::set<int> fds;
};

Guard& guard() {
  static Guard* g = [] {
    auto* g = new Guard();  // never destroyed: atfork handlers may run during exit
    pthread_atfork(
        [] { guard().mu.lock(); },
        [] { guard().mu.unlock(); },
        [] {
          Guard& c = guard();
          for (int fd : c.fds) close(fd);
          c.fds.clear();
          c.mu.unlock();
        });
    return g;
  }();
  return *g;
}

}  // namespace

void forkGuardAdd(int fd) {
  Guard& g = guard();
  std::lock_guard<std::mutex> l(g.mu);
  g.fds.insert(fd);
}

void forkGuardRemove(int fd) {
  Guard& g = guard();
  std::lock_guard<std::mutex> l(g.mu);
  g.fds.erase(fd);
}

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
