#include "comm/pool.h"

#include "common/error.h"
#include "common/memory_limit.h"

namespace rdmacoll {

size_t MemoryPool::sizeClass(size_t bytes) {
  if (bytes <= 4096) return 4096;
  size_t p = 1;
  while (p * 2 <= bytes) p *= 2;  // p = largest power of two <= bytes
  size_t step = p / 4;
  return (bytes + step - 1) / step * step;
}

MemoryPool::Block* MemoryPool::acquire(size_t bytes) {
  size_t cls = sizeClass(bytes);
  std::lock_guard<std::mutex> g(mu_);
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    Block* b = it->second.back();
    it->second.pop_back();
    b->inUse = true;
    return b;
  }
  if (dev_ == nullptr) throw Error("rdmacoll is shut down: cannot allocate memory");
  if (cls >= kHeadroomCheckBytes) {  // (faulting in more than the machine gives gets the process killed)
    const MemoryHeadroom h = memoryHeadroom();
    if (cls > h.bytes) {
      throw OutOfMemory("cannot allocate " + bytesText(cls) + " from rdmacoll's memory pool: this process can get " +
                        bytesText(h.bytes) + " more (" + h.limitedBy + ")");
    }
  }
  auto b = std::make_unique<Block>(Block{dev_->allocate(cls), cls, true});
  Block* raw = b.get();
  blocks_.emplace(reinterpret_cast<uintptr_t>(raw->mem->data()), std::move(b));
  return raw;
}

void MemoryPool::release(Block* b) {
  std::lock_guard<std::mutex> g(mu_);
  b->inUse = false;
  free_[b->sizeClass].push_back(b);
}

const MemoryPool::Block* MemoryPool::find(const void* p, size_t len) const {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(mu_);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return nullptr;
  --it;
  const Block* b = it->second.get();
  uintptr_t start = it->first;
  if (a + len > start + b->mem->size()) return nullptr;
  return b;
}

void MemoryPool::detach() {
  std::lock_guard<std::mutex> g(mu_);
  dev_ = nullptr;
}

size_t MemoryPool::bytesMapped() const {
  std::lock_guard<std::mutex> g(mu_);
  size_t n = 0;
  for (auto& kv : blocks_) n += kv.second->mem->size();
  return n;
}

}  // namespace rdmacoll
