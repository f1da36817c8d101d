#include "comm/pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "common/error.h"
#include "common/memory_limit.h"

namespace rdmacoll {

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Fault a block's pages in again after they were given back (what MAP_POPULATE did when
// the slab was made): one call where the kernel has it, else a store per page. The
// block is free, so its contents do not matter.
void populate(char* p, size_t len) {
  if (madvise(p, len, MADV_POPULATE_WRITE) == 0) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (size_t off = 0; off < len; off += page) reinterpret_cast<volatile char*>(p)[off] = 0;
}

// The whole pages inside [p, p+len) as (offset from base, length); length 0 when none.
std::pair<size_t, size_t> wholePages(const char* base, const char* p, size_t len) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + len) / page * page;
  if (end <= start) return {0, 0};
  return {start - reinterpret_cast<uintptr_t>(base), end - start};
}

}  // namespace

size_t MemoryPool::sizeClass(size_t bytes) {
  if (bytes <= 4096) return 4096;
  size_t p = 1;
  while (p * 2 <= bytes) p *= 2;  // p = largest power of two <= bytes
  size_t step = p / 4;
  return (bytes + step - 1) / step * step;
}

void MemoryPool::newSlab(size_t cls) {
  int& made = slabsOfClass_[cls];
  const size_t most = std::max<size_t>(1, kSlabBytes / cls);
  const size_t count = std::min(most, size_t(1) << std::min(made, 20));
  const size_t bytes = count * cls;
  if (bytes >= kHeadroomCheckBytes) {  // (faulting in more than the machine gives gets the process killed)
    const MemoryHeadroom h = memoryHeadroom();
    if (bytes > h.bytes) {
      throw OutOfMemory("cannot allocate " + bytesText(bytes) + " from rdmacoll's memory pool: this process can get " +
                        bytesText(h.bytes) + " more (" + h.limitedBy + ")");
    }
  }
  slabs_.push_back(dev_->allocate(bytes));
  ++made;
  transport::Memory* slab = slabs_.back().get();
  const bool giveBack = cls >= kDiscardBytes && slab->discardable();
  std::vector<Block*>& list = free_[cls];
  // Pushed in reverse, so that the first block of the slab is handed out first.
  for (size_t i = count; i-- > 0;) {
    char* p = static_cast<char*>(slab->data()) + i * cls;
    auto b = std::make_unique<Block>(Block{slab, p, cls, false, true, giveBack});
    list.push_back(b.get());
    if (giveBack) residentFree_ += cls;
    blocks_.emplace(reinterpret_cast<uintptr_t>(p), std::move(b));
  }
}

MemoryPool::Block* MemoryPool::acquire(size_t bytes) {
  const size_t cls = sizeClass(bytes);
  std::lock_guard<std::mutex> g(mu_);
  auto it = free_.find(cls);
  if (it == free_.end() || it->second.empty()) {
    if (dev_ == nullptr) throw Error("rdmacoll is shut down: cannot allocate memory");
    newSlab(cls);
    it = free_.find(cls);
  }
  Block* b = it->second.back();
  if (!b->resident && cls >= kHeadroomCheckBytes) {  // faulted in again: memory, not address space
    const MemoryHeadroom h = memoryHeadroom(/*addressSpace=*/false);
    if (cls > h.bytes) {
      throw OutOfMemory("cannot take " + bytesText(cls) + " back into rdmacoll's memory pool: this process can get " +
                        bytesText(h.bytes) + " more (" + h.limitedBy + ")");
    }
  }
  it->second.pop_back();
  b->inUse = true;
  if (!b->resident) {
    populate(b->data, b->sizeClass);
    b->resident = true;
  } else if (b->giveBack) {
    residentFree_ -= cls;
  }
  return b;
}

void MemoryPool::release(Block* b) {
  std::lock_guard<std::mutex> g(mu_);
  b->inUse = false;
  free_[b->sizeClass].push_back(b);
  if (b->giveBack) {
    residentFree_ += b->sizeClass;
    giveBack();
  }
}

void MemoryPool::giveBack() {
  if (discardFailed_) return;
  for (auto cls = free_.rbegin(); residentFree_ > keepFree_ && cls != free_.rend() && cls->first >= kDiscardBytes;
       ++cls) {
    for (Block* b : cls->second) {
      if (residentFree_ <= keepFree_) return;
      if (!b->resident || !b->giveBack) continue;
      const auto range = wholePages(static_cast<const char*>(b->mem->data()), b->data, b->sizeClass);
      try {
        if (range.second) b->mem->discard(range.first, range.second);
      } catch (const Error&) {
        discardFailed_ = true;  // (release() runs in destructors: keep the memory, never throw)
        return;
      }
      b->resident = false;
      residentFree_ -= b->sizeClass;
    }
  }
}

const MemoryPool::Block* MemoryPool::find(const void* p, size_t len) const {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(mu_);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return nullptr;
  --it;
  const Block* b = it->second.get();
  uintptr_t start = it->first;
  if (a + len > start + b->sizeClass) return nullptr;
  return b;
}

void MemoryPool::detach() {
  std::lock_guard<std::mutex> g(mu_);
  dev_ = nullptr;
}

size_t MemoryPool::bytesMapped() const {
  std::lock_guard<std::mutex> g(mu_);
  size_t n = 0;
  for (const auto& s : slabs_) n += s->size();
  return n;
}

size_t MemoryPool::bytesResident() const {
  std::lock_guard<std::mutex> g(mu_);
  size_t n = 0;
  for (const auto& kv : blocks_) n += kv.second->resident ? kv.second->sizeClass : 0;
  return n;
}

size_t MemoryPool::slabs() const {
  std::lock_guard<std::mutex> g(mu_);
  return slabs_.size();
}

}  // namespace rdmacoll
