#include "transport/ibverbs/diagnose.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace rdmacoll {
namespace transport {
namespace ibverbs {

namespace {
std::string bytesText(uint64_t b) {
  char buf[64];
  if (b >= (uint64_t(1) << 30)) {
    std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(b) / (1 << 30));
  } else if (b >= (uint64_t(1) << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(b) / (1 << 20));
  } else {
    std::snprintf(buf, sizeof(buf), "%llu KiB", static_cast<unsigned long long>(b >> 10));
  }
  return buf;
}
}  // namespace

std::string unusable(const std::string& cause) {
  return "the ibverbs transport cannot run on this host: " + cause +
         ". Use RDMACOLL_TRANSPORT=shm (all ranks on one host) or RDMACOLL_TRANSPORT=tcp (any IP "
         "network) "
         "instead";
}

std::string libraryMissing(const std::string& library, const std::string& dlerror) {
  return "cannot load " + library + " (" + dlerror +
         "): the RDMA user-space library is not installed (Debian/Ubuntu: apt install libibverbs1 "
         "ibverbs-providers; RHEL: dnf install libibverbs)";
}

std::string deviceListFailed(int err) {
  if (err == ENOSYS) {
    return "ibv_get_device_list failed with ENOSYS (Function not implemented): this kernel has no "
           "RDMA "
           "support (no ib_uverbs module, no /sys/class/infiniband)";
  }
  return sysError("ibv_get_device_list failed", err) +
         (err == EPERM || err == EACCES ? " (no permission to open /dev/infiniband: in a container, pass the "
                                          "devices through)"
                                        : "");
}

std::string registrationFailed(int err, const void* ptr, size_t len, uint64_t memlockBytes) {
  char where[128];
  std::snprintf(where, sizeof(where), "ibv_reg_mr of %zu bytes at %p failed: ", len, ptr);
  std::string s = where;
  if (err == ENOMEM) {
    s += "ENOMEM: the process may not pin that much memory (RLIMIT_MEMLOCK is ";
    s += memlockBytes == UINT64_MAX ? std::string("unlimited") : bytesText(memlockBytes);
    s += "). Raise the limit: `ulimit -l unlimited` in the shell that starts the job, "
         "`* - memlock unlimited` in /etc/security/limits.conf, LimitMEMLOCK=infinity for a systemd "
         "service, or `--ulimit memlock=-1` for a container";
    return s;
  }
  if (err == EFAULT) {
    return s +
           "EFAULT: the range is not (entirely) mapped memory of this process, or it is not "
           "readable and writable; register memory that stays allocated while peers use it";
  }
  if (err == EINVAL) return s + "EINVAL: the device refused the range or the access flags";
  return sysError(s.substr(0, s.size() - 2), err);
}

uint64_t memlockLimit() {
  struct rlimit r;
  if (getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return static_cast<uint64_t>(r.rlim_cur);
}

}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
