// The ibverbs transport's error texts for the failures users meet first (no library, a
// kernel without RDMA, no device or active port, a memlock limit), built from plain
// values so that tests check them without RDMA hardware. Each names the cause and what to
// do about it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace rdmacoll {
namespace transport {
namespace ibverbs {

// "the ibverbs transport cannot run on this host: <cause>; use ..." (init() failures).
std::string unusable(const std::string& cause);

// dlopen of the verbs library failed (dlerror() text).
std::string libraryMissing(const std::string& library, const std::string& dlerror);
// ibv_get_device_list returned NULL with errno `err` (ENOSYS: kernel without RDMA).
std::string deviceListFailed(int err);
// ibv_reg_mr of [ptr, ptr+len) failed with errno `err`. memlockBytes: RLIMIT_MEMLOCK's soft
// limit (UINT64_MAX when unlimited).
std::string registrationFailed(int err, const void* ptr, size_t len, uint64_t memlockBytes);
// The current RLIMIT_MEMLOCK soft limit, UINT64_MAX when unlimited.
uint64_t memlockLimit();

}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
