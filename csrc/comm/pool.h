// Pool of allocated memory: rc.empty() arrays and out-of-place results come from here,
// never from a fresh mapping per call (page faults on fresh buffers are what cost MPI
// 3x above 32 MiB on these machines). Freed blocks return to per-size-class free lists
// and are reused.
//
// Size classes: 4 per power of two (at most 25% waste), at least 4 KiB. Blocks of a class
// are carved from slabs, one device allocation (and so one descriptor, where the backend
// maps memory through one) each: a class's
// first slab holds one block, each next one twice as many, up to kSlabBytes (a class of
// that size or more has a slab per block). Keeping a thousand small results open costs
// about ten descriptors, not a thousand. Slabs are unmapped only when the pool dies
// (peers map them once and cache the mapping, keyed by segment id).
//
// Giving memory back: free blocks of at least kDiscardBytes whose pages are resident count
// against `keepFreeBytes` (RDMACOLL_POOL_FREE_BYTES); past it, the largest of them give their
// pages back (transport::Memory::discard, where the backend allows it) and are faulted in
// again when next used. The mapping and the descriptor stay.
//
// Thread-safe (one mutex): blocks are released from Python destructors while a
// collective may be running on another thread.
// The pool outlives shutdown() while arrays from it are alive: detach() makes it stop
// allocating, blocks stay valid until the last one is released.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/transport.h"

namespace rdmacoll {

class MemoryPool {
 public:
  static constexpr size_t kSlabBytes = size_t(16) << 20;
  static constexpr size_t kDiscardBytes = size_t(1) << 20;

  struct Block {
    transport::Memory* mem;  // the slab holding it: pack() it, and reach the block at data - mem->data()
    char* data;
    size_t sizeClass;  // its bytes
    bool inUse;
    bool resident;  // false once its pages were given back (faulted in again on reuse)
    bool giveBack;  // large enough, and its slab's backend may give pages back
  };
  MemoryPool(transport::Device* dev, size_t keepFreeBytes) : dev_(dev), keepFree_(keepFreeBytes) {}

  Block* acquire(size_t bytes);
  void release(Block* b);
  // The block holding [p, p+len), or nullptr when that range is not pool memory.
  const Block* find(const void* p, size_t len) const;
  void detach();                 // the device is going away: no more allocations
  size_t bytesMapped() const;    // of every slab
  size_t bytesResident() const;  // of the blocks in use, and the free ones not given back
  size_t slabs() const;
  static size_t sizeClass(size_t bytes);

 private:
  void newSlab(size_t cls);  // under mu_: its blocks join the free list
  void giveBack();           // under mu_: while resident free bytes exceed keepFree_

  mutable std::mutex mu_;
  transport::Device* dev_;
  const size_t keepFree_;
  size_t residentFree_ = 0;     // bytes of free, resident blocks that may give their pages back
  bool discardFailed_ = false;  // the backend refused once: keep everything (never throw from release)
  std::vector<std::unique_ptr<transport::Memory>> slabs_;
  std::map<size_t, int> slabsOfClass_;
  std::map<uintptr_t, std::unique_ptr<Block>> blocks_;  // by start address
  std::map<size_t, std::vector<Block*>> free_;          // by size class
};

}  // namespace rdmacoll
