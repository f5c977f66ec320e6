// SPDX-License-Identifier: Apache-2.0
// comm_create / comm_destroy / comm_abort. A communicator is built from one
// out-of-band allgather: every member contributes its worker address and the
// id it chose for the communicator, then connects an endpoint to each
// member (itself included, through UCX's self transport).
#include "comm.h"

#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>

#include "backoff.h"
#include "cma.h"
#include "error.h"
#include "instance.h"
#include "op.h"

namespace loom_ucx {
namespace {

// One member's contribution to the exchange. Every member sends the same
// number of bytes (the allgather needs that), so addresses are padded to a
// fixed slot; the exchange is made once, since an out-of-band allgather may
// not be callable twice (the job store's default is not).
struct OobSlot {
  uint32_t magic;
  uint16_t version;
  uint16_t comm_id;
  int32_t rank;
  int32_t size;
  uint32_t address_len;
  // The member's process id, whatever cma.pid says: members of one host
  // watch each other's processes (liveness.h). Plugins before it sent 0
  // here, so they are simply not watched.
  int32_t pid;
  CmaIdentity cma;  // whether large messages may go by cross-memory attach
};
constexpr uint32_t kOobMagic = 0x4c55434f;  // "LUCO"
constexpr uint16_t kOobVersion = 2;
constexpr size_t kSlotBytes = 4096;
constexpr size_t kMaxAddress = kSlotBytes - sizeof(OobSlot);

// Endpoint errors arrive inside ucp_worker_progress, which always runs under
// the instance mutex, so the communicator may be touched here.
void on_peer_error(void *arg, ucp_ep_h, ucs_status_t status) {
  PeerSlot *slot = static_cast<PeerSlot *>(arg);
  loom_comm *comm = slot->comm;
  if (!comm) return;  // the communicator is gone; its endpoint is closing
  comm->peers[size_t(slot->rank)].failed = true;
  mark_failed(comm, slot->rank, "rank %d failed (UCX: %s)", slot->rank, ucs_status_string(status));
}

uint16_t allocate_id(loom_collective_ctx *ctx) {
  for (;;) {
    const uint16_t id = ctx->next_comm_id++;
    if (id == 0) continue;  // 0 is never used, so a zeroed tag matches nothing
    const bool live = std::any_of(ctx->comms.begin(), ctx->comms.end(), [&](loom_comm *c) { return c->id == id; });
    if (!live) return id;
  }
}

// Closes the communicator's endpoints, forcibly: never waiting for anyone,
// and safe because every endpoint of every member is in
// UCP_ERR_HANDLING_MODE_PEER. (A flush close would also be possible for a
// healthy communicator, but with UCX 1.13 it leaks about 90 KiB per
// shared-memory endpoint that carried a rendezvous message; measured with
// 1000 create/use/destroy cycles, force close leaks nothing.) Mutex held.
void close_endpoints(loom_comm *comm) {
  Worker *w = comm->worker;
  for (Peer &p : comm->peers) {
    if (p.slot) p.slot->comm = nullptr;
    if (!p.ep) {
      delete p.slot;
      continue;
    }
    ucp_request_param_t param;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &param);
    if (UCS_PTR_IS_PTR(r)) {
      w->closing.push_back(Closing{r, p.slot});
    } else {
      delete p.slot;
    }
    p.ep = nullptr;
    p.slot = nullptr;
  }
}

// Frees everything UCX still holds for the communicator, bounded: cancelled
// receives end at the next progress, sends on force-closed endpoints are
// cancelled by UCX, and a transfer a live peer is still completing gets a
// moment to land before the caller may free its buffers. Mutex held.
void release_requests(loom_comm *comm) {
  ucp_worker_h worker = comm->worker->handle;
  std::vector<Xfer *> all;
  if (comm->control_recv.pending()) all.push_back(&comm->control_recv);
  for (ControlSend &cs : comm->control_sends)
    if (cs.xfer.pending()) all.push_back(&cs.xfer);
  for (loom_request *z : comm->zombies) {
    cancel_receives(z);
    if (z->ring_in.pending()) all.push_back(&z->ring_in);
    if (z->ring_out.pending()) all.push_back(&z->ring_out);
    z->alg->for_each_xfer([&](Xfer &x) {
      if (x.pending()) all.push_back(&x);
    });
  }
  for (Xfer *x : all) x->cancel();
  const auto deadline = Clock::now() + std::chrono::milliseconds(100);
  for (;;) {
    bool pending = false;
    for (Xfer *x : all)
      if (x->pending() && !x->poll()) pending = true;
    if (!pending || Clock::now() >= deadline) break;
    ucp_worker_progress(worker);
  }
  // Whatever is left is handed back to UCX, which finishes it without us.
  for (Xfer *x : all) x->abandon();
  for (loom_request *z : comm->zombies) delete z;
  comm->zombies.clear();
  comm->control_sends.clear();
}

loom_status check_slots(const loom_comm &comm, const std::vector<uint8_t> &all) {
  for (int32_t r = 0; r < comm.size; ++r) {
    OobSlot s;
    std::memcpy(&s, all.data() + size_t(r) * kSlotBytes, sizeof s);
    if (s.magic != kOobMagic || s.version != kOobVersion)
      return fail(LOOM_ERR_INVALID_ARGUMENT,
                  "comm_create \"%s\": member %d's out-of-band contribution is not from this plugin version (is "
                  "every member using the ucx plugin?)",
                  comm.name, r);
    if (s.size != comm.size || s.rank != r)
      return fail(LOOM_ERR_INVALID_ARGUMENT,
                  "comm_create \"%s\": member %d says it is rank %d of %d, this rank (%d) was told %d members; every "
                  "member needs the same size and a distinct rank",
                  comm.name, r, s.rank, s.size, comm.rank, comm.size);
    if (s.address_len == 0 || s.address_len > kMaxAddress || s.comm_id == 0)
      return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_create \"%s\": member %d sent a malformed address", comm.name, r);
  }
  return LOOM_OK;
}

int32_t online_cpus() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int32_t(n) : 1;
}

// Creates an endpoint to every member. Mutex held.
loom_status connect(loom_comm *comm, const std::vector<uint8_t> &all) {
  comm->peers.resize(size_t(comm->size));
  std::vector<CmaIdentity> ids(size_t(comm->size));
  for (int32_t r = 0; r < comm->size; ++r) {
    OobSlot s;
    std::memcpy(&s, all.data() + size_t(r) * kSlotBytes, sizeof s);
    ids[size_t(r)] = s.cma;
  }
  comm->cma_everywhere = comm->size > 1;
  for (size_t a = 0; a < ids.size(); ++a)
    for (size_t b = a + 1; b < ids.size(); ++b)
      if (!cma_between(ids[a], ids[b])) comm->cma_everywhere = false;
  // Every rank of a host counts the same members and CPUs, so they agree.
  int32_t here = 0;
  for (int32_t r = 0; r < comm->size; ++r) here += r == comm->rank || cma_between(comm->ctx->cma, ids[size_t(r)]);
  const bool use_cma = !comm->ctx->tuning.cma_only_oversubscribed || here > online_cpus();
  if (!use_cma) comm->cma_everywhere = false;
  for (int32_t r = 0; r < comm->size; ++r) {
    OobSlot s;
    const uint8_t *base = all.data() + size_t(r) * kSlotBytes;
    std::memcpy(&s, base, sizeof s);
    Peer &p = comm->peers[size_t(r)];
    p.comm_id = s.comm_id;
    if (use_cma && r != comm->rank && cma_between(comm->ctx->cma, s.cma)) p.cma_pid = s.cma.pid;
    if (r != comm->rank && same_pid_space(comm->ctx->cma, s.cma)) p.process = watch_process(s.pid);
    p.slot = new PeerSlot{comm, r};
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t *>(base + sizeof(OobSlot));
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = on_peer_error;
    params.err_handler.arg = p.slot;
    const ucs_status_t st = ucp_ep_create(comm->worker->handle, &params, &p.ep);
    if (st != UCS_OK) {
      p.ep = nullptr;
      return fail(st == UCS_ERR_UNREACHABLE ? LOOM_ERR_UNAVAILABLE : LOOM_ERR_SYSTEM,
                  "comm_create \"%s\": cannot connect to rank %d: %s (check the transports option / UCX_TLS)",
                  comm->name, r, ucs_status_string(st));
    }
  }
  // Control messages from any member, reposted after each one.
  post_recv(comm->worker->handle, comm->control_recv, make_tag(comm->id, kClassControl, 0, 0), kControlMask,
            &comm->control_in, sizeof comm->control_in);
  return LOOM_OK;
}

// Logs how UCX connected to the next rank (transports per lane), once per
// communicator, at debug level.
void log_endpoint(loom_comm *comm) {
  if (comm->size < 2 || !comm->ctx->host.log) return;
  char *text = nullptr;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return;
  ucp_ep_print_info(comm->peers[size_t((comm->rank + 1) % comm->size)].ep, f);
  std::fclose(f);
  host_log(comm->ctx, LOOM_LOG_DEBUG, "communicator \"%s\": endpoint to rank %d:\n%s", comm->name,
           (comm->rank + 1) % comm->size, text ? text : "");
  std::free(text);
}

// Takes the communicator out of the instance and frees it. Mutex held.
void dispose(loom_comm *comm) {
  loom_collective_ctx *ctx = comm->ctx;
  Worker *w = comm->worker;
  ctx->comms.erase(std::remove(ctx->comms.begin(), ctx->comms.end(), comm), ctx->comms.end());
  if (comm->notify_failure && comm->ready) {  // tell the others before going
    comm->notify_failure = false;
    broadcast_control(comm, kControlPeerFailed, 0, comm->failed_rank);
    ucp_worker_progress(w->handle);
  }
  if (comm->failed || comm->aborted.load()) w->tainted = true;  // see instance.h
  if (comm->control_recv.pending()) ucp_request_cancel(w->handle, comm->control_recv.req);
  close_endpoints(comm);
  release_requests(comm);
  // Messages of failed or aborted operations that arrived unmatched stay in
  // UCX's unexpected queue (a few per link, freed with the worker): taking
  // one whose sender has since cancelled it (a rendezvous) corrupts UCX
  // 1.13's protocol state, whose request and endpoint ids get reused, and
  // hangs the next communicator between the same processes (seen in the
  // kill tests).
  delete comm;
  release_worker(ctx, w);
}

loom_status create(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **out) {
  if (!ctx || !config || !out)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_create: ctx, config and comm must not be NULL");
  loom_comm_config_v1 cfg;
  std::memset(&cfg, 0, sizeof cfg);
  if (config->struct_size < offsetof(loom_comm_config_v1, timeout_ms) + sizeof cfg.timeout_ms)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_create: config struct_size %u is too small", config->struct_size);
  std::memcpy(&cfg, config, std::min<size_t>(config->struct_size, sizeof cfg));
  const char *label = cfg.name && cfg.name[0] ? cfg.name : "ucx";
  if (cfg.device_type != LOOM_DEVICE_CPU)
    return fail(LOOM_ERR_UNSUPPORTED,
                "comm_create \"%s\": the ucx plugin handles host memory only (device_type %d, LOOM_DEVICE_CPU is %d)",
                label, cfg.device_type, LOOM_DEVICE_CPU);
  if (cfg.size < 1 || cfg.rank < 0 || cfg.rank >= cfg.size)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_create \"%s\": rank %d of size %d is not a valid member", label,
                cfg.rank, cfg.size);
  if (cfg.size >= kMaxRanks)
    return fail(LOOM_ERR_UNAVAILABLE, "comm_create \"%s\": %d members; the ucx plugin supports at most %d", label,
                cfg.size, kMaxRanks - 1);
  const loom_oob_v1 *oob = cfg.oob;
  if (cfg.size > 1 && (!oob || oob->struct_size < sizeof(loom_oob_v1) || !oob->allgather))
    return fail(LOOM_ERR_INVALID_ARGUMENT,
                "comm_create \"%s\": the ucx plugin needs an out-of-band exchange (config->oob with an allgather) to "
                "swap worker addresses among the %d members; the host supplies the job's rendezvous store by default "
                "(set MASTER_ADDR and MASTER_PORT)",
                label, cfg.size);
  auto comm = std::make_unique<loom_comm>();
  comm->ctx = ctx;
  comm->rank = cfg.rank;
  comm->size = cfg.size;
  comm->timeout_ms = cfg.timeout_ms > 0 ? cfg.timeout_ms : ctx->default_timeout_ms;
  std::snprintf(comm->name, sizeof comm->name, "%s", label);
  {
    std::lock_guard<std::mutex> lock(ctx->mu);
    comm->worker = acquire_worker(ctx);
    if (!comm->worker) return LOOM_ERR_UNAVAILABLE;  // the reason is recorded
    const size_t length = comm->worker->address.size();
    if (length > kMaxAddress) {
      release_worker(ctx, comm->worker);
      return fail(LOOM_ERR_UNAVAILABLE,
                  "comm_create \"%s\": this worker's UCX address has %zu bytes, more than the %zu the exchange "
                  "carries; restrict the transports option",
                  label, length, kMaxAddress);
    }
    comm->id = allocate_id(ctx);
    ctx->comms.push_back(comm.get());  // reserves the id; not ready, so the engine skips it
  }
  const std::vector<uint8_t> &address = comm->worker->address;
  std::vector<uint8_t> mine(kSlotBytes, 0), all(kSlotBytes * size_t(cfg.size), 0);
  const OobSlot slot{kOobMagic, kOobVersion, comm->id, cfg.rank, cfg.size, uint32_t(address.size()),
                     int32_t(::getpid()), ctx->cma};
  std::memcpy(mine.data(), &slot, sizeof slot);
  std::memcpy(mine.data() + sizeof slot, address.data(), address.size());
  loom_status s = LOOM_OK;
  if (cfg.size == 1) {
    all = mine;
  } else {
    s = oob->allgather(oob->user, mine.data(), kSlotBytes, all.data(), comm->timeout_ms);
    if (s != LOOM_OK)
      fail(s, "comm_create \"%s\": the out-of-band exchange of worker addresses failed with %s (timeout %lld ms)",
           label, loom_status_name(s), static_cast<long long>(comm->timeout_ms));
  }
  if (s == LOOM_OK) s = check_slots(*comm, all);
  std::lock_guard<std::mutex> lock(ctx->mu);
  if (s == LOOM_OK) s = connect(comm.get(), all);
  if (s != LOOM_OK) {
    const std::string why = last_error_text();
    dispose(comm.release());
    return fail(s, "%s", why.c_str());
  }
  comm->ready = true;
  ctx->live_comms.fetch_add(1);
  host_log(ctx, LOOM_LOG_DEBUG, "communicator \"%s\": rank %d of %d, id %u, timeout %lld ms", comm->name, comm->rank,
           comm->size, comm->id, static_cast<long long>(comm->timeout_ms));
  log_endpoint(comm.get());
  *out = comm.release();
  return LOOM_OK;
}

}  // namespace

void mark_failed(loom_comm *comm, int32_t rank, const char *fmt, ...) {
  if (comm->failed) return;
  comm->failed = true;
  comm->failed_rank = rank;
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(comm->failed_why, sizeof comm->failed_why, fmt, ap);
  va_end(ap);
  comm->notify_failure = true;
  comm->worker->tainted = true;  // see instance.h
  host_log(comm->ctx, LOOM_LOG_WARN, "communicator \"%s\" failed: %s", comm->name, comm->failed_why);
}

void check_processes(loom_comm *comm) {
  if (comm->failed) return;
  for (int32_t r = 0; r < comm->size; ++r) {
    Peer &p = comm->peers[size_t(r)];
    if (!p.process.pid || p.failed) continue;
    const ProcessState st = process_state(p.process);
    if (st != ProcessState::kExited && st != ProcessState::kGone) {
      p.exited_looks = 0;
      continue;
    }
    if (++p.exited_looks < 2) continue;
    p.failed = true;
    mark_failed(comm, r, "rank %d failed (its process %d on this host has exited%s)", r, int(p.process.pid),
                st == ProcessState::kExited ? "; its parent has not reaped it yet" : "");
    return;
  }
}

Scratch take_scratch(loom_comm *comm, size_t bytes) {
  if (comm->scratch && comm->scratch.use_count() == 1 && comm->scratch->size() >= bytes) return comm->scratch;
  Scratch fresh = std::make_shared<std::vector<char>>(bytes);
  // Keep the larger one for later operations, unless someone still holds it.
  if (!comm->scratch || comm->scratch.use_count() > 1 || comm->scratch->size() < bytes) comm->scratch = fresh;
  return fresh;
}

loom_status comm_create(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **comm) noexcept {
  if (comm) *comm = nullptr;
  return guarded([&]() -> loom_status { return create(ctx, config, comm); });
}

loom_status comm_destroy(loom_comm *comm) noexcept {
  return guarded([&]() -> loom_status {
    if (!comm) return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_destroy: comm is NULL");
    if (int64_t n = comm->live_requests.load())
      return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_destroy \"%s\": %lld request(s) not freed yet", comm->name,
                  static_cast<long long>(n));
    loom_collective_ctx *ctx = comm->ctx;
    {
      std::lock_guard<std::mutex> lock(ctx->mu);
      dispose(comm);
    }
    ctx->live_comms.fetch_sub(1);
    return LOOM_OK;
  });
}

loom_status comm_stats(loom_comm *comm, loom_comm_stats_v1 *stats) noexcept {
  if (!comm) return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_stats: comm is NULL");
  if (!stats || stats->struct_size < sizeof(loom_comm_stats_v1))
    return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_stats \"%s\": stats is NULL or its struct_size (%u) is below the %zu "
                "bytes of loom_comm_stats_v1", comm->name, stats ? stats->struct_size : 0u, sizeof(loom_comm_stats_v1));
  const auto get = [](const std::atomic<uint64_t> &a) { return a.load(std::memory_order_relaxed); };
  stats->reserved = 0;
  stats->bytes_sent = get(comm->bytes_sent);
  stats->bytes_received = get(comm->bytes_received);
  stats->messages_sent = get(comm->messages_sent);
  stats->messages_received = get(comm->messages_received);
  stats->operations = get(comm->operations);
  return LOOM_OK;
}

loom_status comm_abort(loom_comm *comm) noexcept {
  return guarded([&]() -> loom_status {
    if (!comm) return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_abort: comm is NULL");
    // Waiters poll this flag between progress calls; no lock, so abort never
    // waits for a thread that is inside UCX.
    if (!comm->aborted.exchange(true))
      host_log(comm->ctx, LOOM_LOG_WARN, "communicator \"%s\" aborted", comm->name);
    return LOOM_OK;
  });
}

}  // namespace loom_ucx
