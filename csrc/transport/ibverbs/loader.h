// libibverbs, loaded at run time: the package imports and runs on hosts without it.
//
// Only the library's exported functions go through this table. The data-path calls
// (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are inline in verbs.h and
// call the provider through the context's ops, so they need no symbol. Never call an
// exported ibv_* function directly in this directory: _core would then need libibverbs
// to load (tests/test_ibverbs.py checks that _core has no undefined ibv_ symbol).
#pragma once
#include <infiniband/verbs.h>

#include <memory>
#include <string>

namespace rdmacoll {
namespace transport {
namespace ibverbs {

struct Verbs {
  ibv_device** (*get_device_list)(int*);
  void (*free_device_list)(ibv_device**);
  const char* (*get_device_name)(ibv_device*);
  ibv_context* (*open_device)(ibv_device*);
  int (*close_device)(ibv_context*);
  int (*query_device)(ibv_context*, ibv_device_attr*);
  int (*query_port_compat)(ibv_context*, uint8_t, struct _compat_ibv_port_attr*);
  int (*query_gid)(ibv_context*, uint8_t, int, ibv_gid*);
  ibv_pd* (*alloc_pd)(ibv_context*);
  int (*dealloc_pd)(ibv_pd*);
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int);
  int (*dereg_mr)(ibv_mr*);
  ibv_comp_channel* (*create_comp_channel)(ibv_context*);
  int (*destroy_comp_channel)(ibv_comp_channel*);
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int);
  int (*destroy_cq)(ibv_cq*);
  int (*get_cq_event)(ibv_comp_channel*, ibv_cq**, void**);
  void (*ack_cq_events)(ibv_cq*, unsigned int);
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*);
  int (*destroy_qp)(ibv_qp*);
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int);
  const char* (*wc_status_str)(ibv_wc_status);
  // Optional (older libraries lack them): nullptr when absent.
  int (*fork_init)();
  ibv_fork_status (*is_fork_initialized)();

  // ibv_query_port as verbs.h defines it (extended op first, compat symbol otherwise).
  int queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const;
};

// Loads `library` (default libibverbs.so.1, or RDMACOLL_IBVERBS_LIBRARY) and resolves the
// table. Throws Error with diagnose.h's text when the library or a symbol is missing. The
// library stays loaded for the life of the process (providers it loaded may not unload
// cleanly, and reloading it costs a scan of the provider directory).
std::unique_ptr<Verbs> loadVerbs(const std::string& library);

}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
