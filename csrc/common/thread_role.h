// What the thread running a collective is there for, which decides how it waits
// (comm/wait.cc). A caller that waits for its own result spins briefly, then yields.
// The background executor (runtime/async.h: the progress thread) runs while the caller
// computes (backward, which launched it): spinning there takes the core that computation
// needs, so it yields at once and sleeps soon, unless a caller of its engine is blocked
// waiting for it, when nothing of this process needs the core and it waits as a caller.
#pragma once

#include <atomic>

namespace rdmacoll {

struct ThreadRole {
  // Set on the background executor: its engine's count of callers blocked waiting.
  const std::atomic<int>* blockedCallers = nullptr;

  bool patient() const { return blockedCallers != nullptr && blockedCallers->load(std::memory_order_relaxed) == 0; }
};

inline ThreadRole& threadRole() {
  thread_local ThreadRole role;
  return role;
}

}  // namespace rdmacoll
