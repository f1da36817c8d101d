#include "transport/ibverbs/loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "transport/ibverbs/diagnose.h"

namespace rdmacoll {
namespace transport {
namespace ibverbs {

namespace {

constexpr const char* kDefaultLibrary = "libibverbs.so.1";

template <typename F>
void resolve(void* lib, const std::string& libName, const char* symbol, F* out, bool required) {
  dlerror();
  void* p = dlsym(lib, symbol);
  if (!p && required) {
    throw Error(unusable(libName + " has no " + symbol +
                         " (the library is older than this transport needs: "
                         "rdma-core 17 or newer)"));
  }
  *out = reinterpret_cast<F>(p);
}

}  // namespace

int Verbs::queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const {
  struct verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx) return vctx->query_port(ctx, port, attr, sizeof(*attr));
  std::memset(attr, 0, sizeof(*attr));
  return query_port_compat(ctx, port, reinterpret_cast<struct _compat_ibv_port_attr*>(attr));
}

std::unique_ptr<Verbs> loadVerbs(const std::string& library) {
  const std::string name = library.empty() ? std::string(kDefaultLibrary) : library;
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    throw Error(unusable(libraryMissing(name, e ? e : "not found")));
  }
  auto v = std::make_unique<Verbs>();
  resolve(lib, name, "ibv_get_device_list", &v->get_device_list, true);
  resolve(lib, name, "ibv_free_device_list", &v->free_device_list, true);
  resolve(lib, name, "ibv_get_device_name", &v->get_device_name, true);
  resolve(lib, name, "ibv_open_device", &v->open_device, true);
  resolve(lib, name, "ibv_close_device", &v->close_device, true);
  resolve(lib, name, "ibv_query_device", &v->query_device, true);
  resolve(lib, name, "ibv_query_port", &v->query_port_compat, true);
  resolve(lib, name, "ibv_query_gid", &v->query_gid, true);
  resolve(lib, name, "ibv_alloc_pd", &v->alloc_pd, true);
  resolve(lib, name, "ibv_dealloc_pd", &v->dealloc_pd, true);
  resolve(lib, name, "ibv_reg_mr", &v->reg_mr, true);
  resolve(lib, name, "ibv_dereg_mr", &v->dereg_mr, true);
  resolve(lib, name, "ibv_create_comp_channel", &v->create_comp_channel, true);
  resolve(lib, name, "ibv_destroy_comp_channel", &v->destroy_comp_channel, true);
  resolve(lib, name, "ibv_create_cq", &v->create_cq, true);
  resolve(lib, name, "ibv_destroy_cq", &v->destroy_cq, true);
  resolve(lib, name, "ibv_get_cq_event", &v->get_cq_event, true);
  resolve(lib, name, "ibv_ack_cq_events", &v->ack_cq_events, true);
  resolve(lib, name, "ibv_create_qp", &v->create_qp, true);
  resolve(lib, name, "ibv_destroy_qp", &v->destroy_qp, true);
  resolve(lib, name, "ibv_modify_qp", &v->modify_qp, true);
  resolve(lib, name, "ibv_wc_status_str", &v->wc_status_str, true);
  resolve(lib, name, "ibv_fork_init", &v->fork_init, false);
  resolve(lib, name, "ibv_is_fork_initialized", &v->is_fork_initialized, false);
  return v;
}

}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
