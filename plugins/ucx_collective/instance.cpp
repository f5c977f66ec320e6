// SPDX-License-Identifier: Apache-2.0
// init / fini, the progress engine, and UCX's log messages routed into the
// host's log.
#include "instance.h"

#include <ucs/debug/log_def.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "../common/listen_address.h"
#include "backoff.h"
#include "comm.h"
#include "error.h"
#include "loom/cxx/options.hpp"
#include "op.h"
#include "options.h"

namespace loom_ucx {
namespace {

// UCX writes its warnings and errors to stderr, but plugins never print: a
// log handler, installed once per process and kept (the plugin stays
// resident), hands them to the first live instance's host, or lets UCX
// print them when no instance is alive.
std::mutex g_log_mutex;
std::vector<const loom_collective_ctx *> g_instances;
bool g_log_handler_installed = false;

ucs_log_func_rc_t ucx_log_handler(const char *file, unsigned line, const char *, ucs_log_level_t level,
                                  const ucs_log_component_config_t *, const char *message, va_list ap) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  if (g_instances.empty()) return UCS_LOG_FUNC_RC_CONTINUE;
  char text[768];
  std::vsnprintf(text, sizeof text, message, ap);
  loom_log_level lv = level <= UCS_LOG_LEVEL_WARN ? LOOM_LOG_WARN : LOOM_LOG_DEBUG;
  // Expected, not a problem: MM_ERROR_HANDLING is set on every context
  // (harmless when UCX_TLS leaves shared memory out), and a worker retired
  // after a failure still holds cancelled requests and unreceived strays.
  for (const char *expected : {"MM_ERROR_HANDLING", "was not returned to mpool", "remain in the queue",
                               "was not matched"})
    if (std::strstr(text, expected)) lv = LOOM_LOG_DEBUG;
  const char *base = file ? std::strrchr(file, '/') : nullptr;
  host_log(g_instances.front(), lv, "UCX %s: %s (%s:%u)", level <= UCS_LOG_LEVEL_ERROR ? "error" : "warning", text,
           base ? base + 1 : (file ? file : "?"), line);
  return UCS_LOG_FUNC_RC_STOP;
}

void register_instance(const loom_collective_ctx *ctx) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  g_instances.push_back(ctx);
  if (!g_log_handler_installed) {
    ucs_log_push_handler(ucx_log_handler);
    g_log_handler_installed = true;
  }
}

void unregister_instance(const loom_collective_ctx *ctx) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  g_instances.erase(std::remove(g_instances.begin(), g_instances.end(), ctx), g_instances.end());
}

// The network device listen names, or "" when UCX may use every one. UCX's
// TCP transport opens a listening socket on the address of each device it
// uses (checked with ss on UCX 1.13), so confining the devices is what keeps
// it off the other interfaces.
loom_status read_listen_device(const loom_collective_ctx &c, std::string *device) {
  const std::string text = loom::cxx::Options(c.host).text(kOptions[kOptListen]);
  device->clear();
  if (text.empty()) return LOOM_OK;
  loom_net::ListenAddress a;
  std::string why;
  if (!loom_net::resolve_listen_address(text, AF_UNSPEC, std::chrono::seconds(5), &a, &why))
    return fail(LOOM_ERR_INVALID_ARGUMENT,
                "option listen = '%s' is not valid: %s; use an address of this machine (e.g. 127.0.0.1), a name "
                "that resolves to one, a wildcard (0.0.0.0) or empty",
                text.c_str(), why.c_str());
  if (loom_net::is_wildcard(a)) return LOOM_OK;
  *device = loom_net::interface_of(a);
  if (device->empty())
    return fail(LOOM_ERR_INVALID_ARGUMENT, "option listen = '%s': no network interface holds %s", text.c_str(),
                a.text.c_str());
  return LOOM_OK;
}

loom_status read_options(loom_collective_ctx &c, std::string *transports, int64_t *keepalive_ms) {
  const loom::cxx::Options o(c.host);
  LOOM_CXX_TRY(o.get_int(kOptions[kOptTimeoutMs], 1, &c.default_timeout_ms));
  LOOM_CXX_TRY(o.get_int(kOptions[kOptRingThreshold], 0, &c.tuning.ring_threshold));
  LOOM_CXX_TRY(o.get_int(kOptions[kOptTreePipelineThreshold], 0, &c.tuning.tree_pipeline_threshold));
  LOOM_CXX_TRY(o.get_int(kOptions[kOptChunkBytes], 64, &c.tuning.chunk_bytes));
  LOOM_CXX_TRY(o.get_int(kOptions[kOptPipelineDepth], 1, &c.tuning.pipeline_depth));
  LOOM_CXX_TRY(o.get_int(kOptions[kOptCmaThreshold], -1, &c.tuning.cma_threshold));
  LOOM_CXX_TRY(o.get_bool(kOptions[kOptCmaWholeBlocks], &c.tuning.cma_whole_blocks));
  LOOM_CXX_TRY(o.get_bool(kOptions[kOptCmaOnlyOversubscribed], &c.tuning.cma_only_oversubscribed));
  LOOM_CXX_TRY(o.get_int(kOptions[kOptKeepaliveMs], 1, keepalive_ms));
  LOOM_CXX_TRY(o.get_int(kOptions[kOptSpinUs], 0, &c.spin_us));
  LOOM_CXX_TRY(o.get_int(kOptions[kOptYieldUs], 0, &c.yield_us));
  if (c.tuning.pipeline_depth > 64)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "option pipeline_depth = %lld exceeds 64",
                static_cast<long long>(c.tuning.pipeline_depth));
  *transports = o.text(kOptions[kOptTransports]);
  return LOOM_OK;
}

loom_status start_ucx(loom_collective_ctx &c, const std::string &transports, int64_t keepalive_ms,
                      const std::string &device) {
  ucp_config_t *config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return fail(LOOM_ERR_UNAVAILABLE, "ucp_config_read failed: %s", ucs_status_string(s));
  // Shared memory only offers peer-failure detection (through keepalive)
  // when asked; without it UCX would fall back to TCP for every endpoint in
  // UCP_ERR_HANDLING_MODE_PEER.
  ucp_config_modify(config, "MM_ERROR_HANDLING", "y");
  const std::string keepalive = std::to_string(keepalive_ms) + "ms";
  ucp_config_modify(config, "KEEPALIVE_INTERVAL", keepalive.c_str());
  if (!device.empty() && (s = ucp_config_modify(config, "NET_DEVICES", device.c_str())) != UCS_OK) {
    ucp_config_release(config);
    return fail(LOOM_ERR_INVALID_ARGUMENT, "option listen: UCX refused network device \"%s\": %s", device.c_str(),
                ucs_status_string(s));
  }
  if (!transports.empty() && (s = ucp_config_modify(config, "TLS", transports.c_str())) != UCS_OK) {
    ucp_config_release(config);
    return fail(LOOM_ERR_INVALID_ARGUMENT, "option transports = \"%s\" was refused by UCX: %s", transports.c_str(),
                ucs_status_string(s));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  s = ucp_init(&params, config, &c.context);
  ucp_config_release(config);
  if (s != UCS_OK)
    return fail(LOOM_ERR_UNAVAILABLE, "ucp_init failed: %s (transports \"%s\")", ucs_status_string(s),
                transports.c_str());
  return acquire_worker(&c) ? LOOM_OK : LOOM_ERR_UNAVAILABLE;
}

loom_status new_worker(loom_collective_ctx &c, Worker *w) {
  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // every call is made under ctx->mu
  ucs_status_t s = ucp_worker_create(c.context, &wparams, &w->handle);
  if (s != UCS_OK) {
    w->handle = nullptr;
    return fail(LOOM_ERR_UNAVAILABLE, "ucp_worker_create failed: %s", ucs_status_string(s));
  }
  ucp_address_t *address = nullptr;
  size_t length = 0;
  s = ucp_worker_get_address(w->handle, &address, &length);
  if (s != UCS_OK) return fail(LOOM_ERR_UNAVAILABLE, "ucp_worker_get_address failed: %s", ucs_status_string(s));
  const uint8_t *bytes = reinterpret_cast<const uint8_t *>(address);
  w->address.assign(bytes, bytes + length);
  ucp_worker_release_address(w->handle, address);
  return LOOM_OK;
}

// Closes what is left on a worker nobody uses, bounded, and destroys it.
void destroy_worker(Worker &w) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(200);
  while (!w.closing.empty() && Clock::now() < deadline) {
    ucp_worker_progress(w.handle);
    for (size_t i = 0; i < w.closing.size();) {
      Closing &cl = w.closing[i];
      if (cl.request && ucp_request_check_status(cl.request) == UCS_INPROGRESS) {
        ++i;
        continue;
      }
      if (cl.request) ucp_request_free(cl.request);
      delete cl.slot;
      cl = w.closing.back();
      w.closing.pop_back();
    }
  }
  for (Closing &cl : w.closing) {
    if (cl.request) ucp_request_free(cl.request);
    delete cl.slot;
  }
  w.closing.clear();
  if (w.handle) ucp_worker_destroy(w.handle);
  w.handle = nullptr;
}

void stop_ucx(loom_collective_ctx &c) {
  for (auto &w : c.workers) destroy_worker(*w);
  c.workers.clear();
  if (c.context) ucp_cleanup(c.context);
  c.context = nullptr;
}

loom_status init_impl(const loom_host_v1 *host, loom_collective_ctx **out) {
  if (!host || !out) return fail(LOOM_ERR_INVALID_ARGUMENT, "init: host and ctx must not be NULL");
  auto c = std::make_unique<loom_collective_ctx>();
  c->host = loom::cxx::copy_host(*host);  // what the host filled in; the rest "unknown"
  std::string transports;
  int64_t keepalive_ms = 0;
  LOOM_CXX_TRY(read_options(*c, &transports, &keepalive_ms));
  std::string device;
  LOOM_CXX_TRY(read_listen_device(*c, &device));
  c->cma = cma_self();
  c->process_check_ms = keepalive_ms;
  register_instance(c.get());  // UCX may log while starting
  loom_status s = start_ucx(*c, transports, keepalive_ms, device);
  if (s == LOOM_OK) release_worker(c.get(), c->workers.back().get());  // made now so init reports trouble
  if (s != LOOM_OK) {
    stop_ucx(*c);
    unregister_instance(c.get());
    return s;
  }
  host_log(c.get(), LOOM_LOG_DEBUG,
           "UCX %s ready: worker address %zu bytes, transports \"%s\", network devices \"%s\", ring from %lld B, tree pipeline from %lld B, "
           "chunk %lld B x %lld, cross-memory attach from %lld B%s",
           ucp_get_version_string(), c->workers.back()->address.size(), transports.empty() ? "(UCX's choice)" : transports.c_str(),
           device.empty() ? "(UCX's choice)" : device.c_str(),
           static_cast<long long>(c->tuning.ring_threshold), static_cast<long long>(c->tuning.tree_pipeline_threshold),
           static_cast<long long>(c->tuning.chunk_bytes), static_cast<long long>(c->tuning.pipeline_depth),
           static_cast<long long>(c->tuning.cma_threshold), c->cma.pid ? "" : " (not available here)");
  *out = c.release();
  return LOOM_OK;
}

}  // namespace

Worker *acquire_worker(loom_collective_ctx *ctx) {
  if (ctx->workers.empty() || ctx->workers.back()->tainted) {
    auto w = std::make_unique<Worker>();
    if (new_worker(*ctx, w.get()) != LOOM_OK) {
      destroy_worker(*w);
      return nullptr;
    }
    ctx->workers.push_back(std::move(w));
  }
  Worker *w = ctx->workers.back().get();
  ++w->comms;
  return w;
}

void release_worker(loom_collective_ctx *ctx, Worker *w) {
  if (--w->comms > 0 || !w->tainted) return;
  destroy_worker(*w);
  ctx->workers.erase(std::find_if(ctx->workers.begin(), ctx->workers.end(),
                                  [&](const std::unique_ptr<Worker> &p) { return p.get() == w; }));
}

bool progress_all(loom_collective_ctx *ctx) {
  unsigned events = 0;
  for (auto &w : ctx->workers) {
    for (int i = 0; i < 4; ++i) {
      const unsigned n = ucp_worker_progress(w->handle);
      if (n == 0) break;
      events += n;
    }
    for (size_t i = 0; i < w->closing.size();) {
      Closing &cl = w->closing[i];
      if (cl.request && ucp_request_check_status(cl.request) == UCS_INPROGRESS) {
        ++i;
        continue;
      }
      if (cl.request) ucp_request_free(cl.request);
      delete cl.slot;
      cl = w->closing.back();
      w->closing.pop_back();
    }
  }
  // Members' processes on this host, once per process_check_ms for the
  // whole instance (a progress pass runs thousands of times a second).
  if (ctx->process_check_ms > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= ctx->next_process_check) {
      ctx->next_process_check = now + std::chrono::milliseconds(ctx->process_check_ms);
      for (loom_comm *comm : ctx->comms)
        if (comm->ready) check_processes(comm);
    }
  }
  for (loom_comm *comm : ctx->comms)
    if (comm->ready) service(comm);
  for (loom_request *op = ctx->active; op;) {
    loom_request *next = op->next;  // advancing may take op off the list
    advance_op(op);
    op = next;
  }
  // Failures found while advancing: tell the other members now, the caller
  // may destroy the communicator before the next pass.
  for (loom_comm *comm : ctx->comms)
    if (comm->ready && comm->notify_failure) service(comm);
  return events != 0;
}

loom_status init(const loom_host_v1 *host, loom_collective_ctx **ctx, char *why, size_t why_len) noexcept {
  return loom::cxx::guarded_init(ctx, why, why_len, [&] { return init_impl(host, ctx); });
}

void fini(loom_collective_ctx *ctx) noexcept {
  if (!ctx) return;
  guarded([&]() -> loom_status {
    if (int n = ctx->live_comms.load()) {
      host_log(ctx, LOOM_LOG_ERROR, "fini called with %d communicator(s) not destroyed; UCX is left running", n);
      unregister_instance(ctx);
      return LOOM_OK;  // the communicators still point into the worker: leak it all
    }
    {
      std::lock_guard<std::mutex> lock(ctx->mu);
      stop_ucx(*ctx);  // endpoints still closing get a bounded wait
    }
    unregister_instance(ctx);
    return LOOM_OK;
  });
  if (ctx->live_comms.load() == 0) delete ctx;
}

const char *last_error(loom_collective_ctx *) noexcept { return last_error_text(); }

}  // namespace loom_ucx
