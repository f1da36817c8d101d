#include "common/fork_guard.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <unordered_set>

namespace rdmacoll {
namespace forkguard {

namespace {
struct Registry {
  std::mutex mu;
  std::unordered_set<int> fds;
  std::atomic<uint64_t> generation{0};
};

// Never destroyed: fork handlers and late destructors (static Communicators) may run
// after static destruction began.
Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    pthread_atfork([] { registry().mu.lock(); }, [] { registry().mu.unlock(); },
                   [] {
                     Registry& g = registry();
                     for (int fd : g.fds) ::close(fd);
                     g.fds.clear();
                     g.generation.fetch_add(1);
                     g.mu.unlock();
                   });
    return reg;
  }();
  return *r;
}
}  // namespace

int track(int fd) {
  if (fd < 0) return fd;
  Registry& g = registry();
  std::lock_guard<std::mutex> l(g.mu);
  g.fds.insert(fd);
  return fd;
}

void release(int fd) {
  if (fd < 0) return;
  Registry& g = registry();
  std::lock_guard<std::mutex> l(g.mu);
  if (g.fds.erase(fd) != 0) ::close(fd);
}

uint64_t generation() { return registry().generation.load(std::memory_order_relaxed); }

int trackedCount() {
  Registry& g = registry();
  std::lock_guard<std::mutex> l(g.mu);
  return static_cast<int>(g.fds.size());
}

}  // namespace forkguard
}  // namespace rdmacoll
