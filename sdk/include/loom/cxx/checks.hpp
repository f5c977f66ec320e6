// SPDX-License-Identifier: Apache-2.0
// Loom C++ plugin layer: the argument checks every collective operation
// makes, each with the message that names the operation and the argument.
// Header-only; each check records its message with fail (errors.hpp) and
// returns LOOM_ERR_INVALID_ARGUMENT, or LOOM_OK.
//
// collective.h's order of refusals, which an operation keeps by calling
// these in turn:
//  1. INVALID_ARGUMENT: begin (comm, request), then check_data (dtype, count),
//     check_scale (allreduce_scaled), check_reduce_op, check_rank (root,
//     peer), check_total (size * count buffers), check_buffer (NULL with a
//     count), and the overlap rules (check_overlap);
//  2. then ABORTED: refuse_if_aborted, asked only once the arguments passed;
//  3. then UNSUPPORTED (memory the backend cannot use): the backend's own.
// check_allreduce ... check_point_to_point make an operation's whole list of
// INVALID_ARGUMENT checks in that order, after begin.
// The in-place rules (collective.h): buffers that overlap are allowed only
// when they are exactly in place: send == recv (allreduce, broadcast, reduce,
// alltoall), send == recv + rank * sendcount (allgather), recv == send +
// rank * recvcount (reduce_scatter).
#ifndef LOOM_CXX_CHECKS_HPP
#define LOOM_CXX_CHECKS_HPP

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "loom/collective.h"
#include "loom/cxx/errors.hpp"

namespace loom {
namespace cxx {

// ---- Names and classes of dtypes and reduce ops ----

// "f32", ...; "unknown dtype" for a value collective.h does not define.
inline const char *dtype_name(loom_dtype dtype) noexcept {
  static const char *const names[] = {"?", "f16", "bf16", "f32", "f64", "i8", "u8", "i32", "i64"};
  return dtype >= 1 && dtype <= 8 ? names[dtype] : "unknown dtype";
}

// "sum", ...; "unknown op" for a value collective.h does not define.
inline const char *reduce_op_name(loom_reduce_op op) noexcept {
  static const char *const names[] = {"?", "sum", "prod", "min", "max", "avg"};
  return op >= 1 && op <= 5 ? names[op] : "unknown op";
}

inline bool known_dtype(loom_dtype dtype) noexcept { return loom_dtype_size(dtype) != 0; }

inline bool known_reduce_op(loom_reduce_op op) noexcept { return op >= LOOM_REDUCE_SUM && op <= LOOM_REDUCE_AVG; }

// The floating dtypes, the only ones a scaled allreduce takes.
inline bool is_floating(loom_dtype dtype) noexcept {
  return dtype == LOOM_DTYPE_F16 || dtype == LOOM_DTYPE_BF16 || dtype == LOOM_DTYPE_F32 || dtype == LOOM_DTYPE_F64;
}

// ---- Buffer arithmetic ----

inline const char *at(const void *base, std::size_t offset) noexcept {
  return static_cast<const char *>(base) + offset;
}

// Whether [a, a + na) and [b, b + nb) share a byte (empty ranges share none).
inline bool overlaps(const void *a, std::size_t na, const void *b, std::size_t nb) noexcept {
  const std::uintptr_t x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return na > 0 && nb > 0 && x < y + nb && y < x + na;
}

// ---- The checks, in collective.h's order ----

// What every operation checks first. Clears *request, so that a failure
// leaves NULL. request == NULL asks for inline completion
// (LOOM_CAP_INLINE_COMPLETION): a plugin that does not offer it passes
// no_inline, the end of its refusal ("request must not be NULL").
inline loom_status begin(const loom_comm *comm, loom_request **request, const char *op,
                         const char *no_inline = nullptr) noexcept {
  if (!request) {
    if (no_inline) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s", op, no_inline);
  } else {
    *request = nullptr;
  }
  if (!comm) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: comm is NULL", op);
  return LOOM_OK;
}

// dtype is one collective.h defines; stores its size in bytes.
inline loom_status check_dtype(loom_dtype dtype, const char *op, std::size_t *elem) noexcept {
  *elem = loom_dtype_size(dtype);
  if (*elem == 0) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: unknown dtype %u", op, unsigned(dtype));
  return LOOM_OK;
}

// count elements of elem bytes fit the address space; stores their size.
inline loom_status check_count(uint64_t count, std::size_t elem, const char *op, std::size_t *bytes) noexcept {
  *bytes = 0;  // set on every path, so callers' sizes are never read unset
  if (count > uint64_t(SIZE_MAX) / elem)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: count %llu overflows the address space", op,
                static_cast<unsigned long long>(count));
  *bytes = std::size_t(count) * elem;
  return LOOM_OK;
}

// A backend's own bound on counts, below the address space's (MPI's int
// counts): what names it in the refusal, "MPI's int count limit".
struct CountLimit {
  uint64_t max = UINT64_MAX;
  const char *what = "the count limit";
};

// check_dtype, the backend's limit, then check_count: stores the size in
// bytes of count elements.
inline loom_status check_data(loom_dtype dtype, uint64_t count, const char *op, std::size_t *bytes,
                              const CountLimit &limit = {}) noexcept {
  *bytes = 0;
  std::size_t elem = 0;
  LOOM_CXX_TRY(check_dtype(dtype, op, &elem));
  if (count > limit.max)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: count %llu exceeds %s (%llu); split the operation", op,
                static_cast<unsigned long long>(count), limit.what, static_cast<unsigned long long>(limit.max));
  return check_count(count, elem, op, bytes);
}

// allreduce_scaled's own rules: a floating dtype and a finite scale. false
// when both hold, else true with the reason in why (for a plugin that adds
// its own words); check_scale is the same as a status.
inline bool scaled_allreduce_refused(loom_dtype dtype, double scale, char *why, std::size_t len) noexcept {
  if (!is_floating(dtype)) {
    std::snprintf(why, len, "allreduce_scaled: dtype %s is not a floating type (f16, bf16, f32, f64)",
                  dtype_name(dtype));
    return true;
  }
  if (!std::isfinite(scale)) {
    std::snprintf(why, len, "allreduce_scaled: scale %g is not a finite number", scale);
    return true;
  }
  return false;
}

inline loom_status check_scale(loom_dtype dtype, double scale) noexcept {
  char why[128];
  if (scaled_allreduce_refused(dtype, scale, why, sizeof why)) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s", why);
  return LOOM_OK;
}

// op is one collective.h defines (whether the backend has it for this dtype
// is the backend's question, after this one).
inline loom_status check_reduce_op(loom_reduce_op op, const char *name) noexcept {
  if (!known_reduce_op(op)) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: unknown reduce op %u", name, unsigned(op));
  return LOOM_OK;
}

// A root or peer rank r of a communicator of size members: in [0, size).
// The communicator's size comes first, as in check_total.
inline loom_status check_rank(int32_t size, int32_t r, const char *op, const char *which) noexcept {
  if (r < 0 || r >= size)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s %d is out of range [0, %d)", op, which, int(r), int(size));
  return LOOM_OK;
}

// The size of a buffer of size blocks of block_bytes (allgather's recv,
// reduce_scatter's send, alltoall's both), which must fit the address space.
inline loom_status check_total(int32_t size, std::size_t block_bytes, const char *op, std::size_t *total) noexcept {
  *total = 0;
  if (size < 0 || (block_bytes > 0 && std::size_t(size) > SIZE_MAX / block_bytes))
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %d blocks of %zu bytes overflow the address space", op, int(size),
                block_bytes);
  *total = block_bytes * std::size_t(size);
  return LOOM_OK;
}

// A buffer may be NULL only when it holds nothing.
inline loom_status check_buffer(const void *buf, uint64_t count, const char *op, const char *which) noexcept {
  if (!buf && count > 0)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s is NULL but count is %llu", op, which,
                static_cast<unsigned long long>(count));
  return LOOM_OK;
}

inline loom_status overlap_error(const char *op, const char *rule) noexcept {
  return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: send and recv overlap but are not in place (in place needs %s)", op,
              rule);
}

// The overlap rule: send [send, send + send_bytes) and recv [recv, recv +
// recv_bytes) may share bytes only when in_place (the operation's exact
// in-place layout, named by rule for the message).
inline loom_status check_overlap(const void *send, std::size_t send_bytes, const void *recv, std::size_t recv_bytes,
                                 bool in_place, const char *op, const char *rule) noexcept {
  if (!in_place && overlaps(send, send_bytes, recv, recv_bytes)) return overlap_error(op, rule);
  return LOOM_OK;
}

// ABORTED, once the arguments passed: comm_abort was called on comm (named).
inline loom_status refuse_if_aborted(bool aborted, const char *op, const char *comm_name) noexcept {
  if (aborted) return fail(LOOM_ERR_ABORTED, "%s: communicator \"%s\" was aborted", op, comm_name);
  return LOOM_OK;
}

// ---- Each operation's checks, in order (after begin) ----

// The calling rank and its communicator's size.
struct Member {
  int32_t rank;
  int32_t size;
};

// What the checks found: the size of one block (count elements), of the
// size-block buffer where there is one, and the layout.
struct Layout {
  std::size_t bytes = 0;
  std::size_t total = 0;
  bool in_place = false;  // the operation's exact in-place layout
  bool at_root = false;   // broadcast, reduce: this rank is the root
};

// allreduce, or allreduce_scaled given scale (whose reduction is a sum:
// reduce_op is not looked at then).
inline loom_status check_allreduce(const char *op, const void *send, const void *recv, uint64_t count,
                                   loom_dtype dtype, loom_reduce_op reduce_op, const double *scale, Layout *out,
                                   const CountLimit &limit = {}) noexcept {
  *out = Layout{};
  LOOM_CXX_TRY(check_data(dtype, count, op, &out->bytes, limit));
  if (scale) LOOM_CXX_TRY(check_scale(dtype, *scale));
  else LOOM_CXX_TRY(check_reduce_op(reduce_op, op));
  LOOM_CXX_TRY(check_buffer(send, count, op, "send"));
  LOOM_CXX_TRY(check_buffer(recv, count, op, "recv"));
  out->in_place = send == recv;
  return check_overlap(send, out->bytes, recv, out->bytes, out->in_place, op, "send == recv");
}

// send is significant at the root only.
inline loom_status check_broadcast(Member m, const void *send, const void *recv, uint64_t count, loom_dtype dtype,
                                   int32_t root, Layout *out, const CountLimit &limit = {}) noexcept {
  const char *op = "broadcast";
  *out = Layout{};
  LOOM_CXX_TRY(check_data(dtype, count, op, &out->bytes, limit));
  LOOM_CXX_TRY(check_rank(m.size, root, op, "root"));
  LOOM_CXX_TRY(check_buffer(recv, count, op, "recv"));
  out->at_root = m.rank == root;
  if (!out->at_root) return LOOM_OK;
  LOOM_CXX_TRY(check_buffer(send, count, op, "send"));
  out->in_place = send == recv;
  return check_overlap(send, out->bytes, recv, out->bytes, out->in_place, op, "send == recv");
}

// recv is significant at the root only.
inline loom_status check_reduce(Member m, const void *send, const void *recv, uint64_t count, loom_dtype dtype,
                                loom_reduce_op reduce_op, int32_t root, Layout *out,
                                const CountLimit &limit = {}) noexcept {
  const char *op = "reduce";
  *out = Layout{};
  LOOM_CXX_TRY(check_data(dtype, count, op, &out->bytes, limit));
  LOOM_CXX_TRY(check_reduce_op(reduce_op, op));
  LOOM_CXX_TRY(check_rank(m.size, root, op, "root"));
  LOOM_CXX_TRY(check_buffer(send, count, op, "send"));
  out->at_root = m.rank == root;
  if (!out->at_root) return LOOM_OK;
  LOOM_CXX_TRY(check_buffer(recv, count, op, "recv"));
  out->in_place = send == recv;
  return check_overlap(send, out->bytes, recv, out->bytes, out->in_place, op, "send == recv");
}

// recv holds size blocks; in place, send is this rank's block of recv.
inline loom_status check_allgather(Member m, const void *send, const void *recv, uint64_t sendcount,
                                   loom_dtype dtype, Layout *out, const CountLimit &limit = {}) noexcept {
  const char *op = "allgather";
  *out = Layout{};
  LOOM_CXX_TRY(check_data(dtype, sendcount, op, &out->bytes, limit));
  LOOM_CXX_TRY(check_total(m.size, out->bytes, op, &out->total));
  LOOM_CXX_TRY(check_buffer(send, sendcount, op, "send"));
  LOOM_CXX_TRY(check_buffer(recv, sendcount, op, "recv"));
  out->in_place = send == at(recv, std::size_t(m.rank) * out->bytes);
  return check_overlap(send, out->bytes, recv, out->total, out->in_place, op, "send == recv + rank * sendcount");
}

// send holds size blocks; in place, recv is this rank's block of send.
inline loom_status check_reduce_scatter(Member m, const void *send, const void *recv, uint64_t recvcount,
                                        loom_dtype dtype, loom_reduce_op reduce_op, Layout *out,
                                        const CountLimit &limit = {}) noexcept {
  const char *op = "reduce_scatter";
  *out = Layout{};
  LOOM_CXX_TRY(check_data(dtype, recvcount, op, &out->bytes, limit));
  LOOM_CXX_TRY(check_total(m.size, out->bytes, op, &out->total));
  LOOM_CXX_TRY(check_reduce_op(reduce_op, op));
  LOOM_CXX_TRY(check_buffer(send, recvcount, op, "send"));
  LOOM_CXX_TRY(check_buffer(recv, recvcount, op, "recv"));
  out->in_place = recv == at(send, std::size_t(m.rank) * out->bytes);
  return check_overlap(send, out->total, recv, out->bytes, out->in_place, op, "recv == send + rank * recvcount");
}

// send and recv hold size blocks each.
inline loom_status check_alltoall(Member m, const void *send, const void *recv, uint64_t count, loom_dtype dtype,
                                  Layout *out, const CountLimit &limit = {}) noexcept {
  const char *op = "alltoall";
  *out = Layout{};
  LOOM_CXX_TRY(check_data(dtype, count, op, &out->bytes, limit));
  LOOM_CXX_TRY(check_total(m.size, out->bytes, op, &out->total));
  LOOM_CXX_TRY(check_buffer(send, count, op, "send"));
  LOOM_CXX_TRY(check_buffer(recv, count, op, "recv"));
  out->in_place = send == recv;
  return check_overlap(send, out->total, recv, out->total, out->in_place, op, "send == recv");
}

// send or recv (op): one buffer, one peer.
inline loom_status check_point_to_point(const char *op, Member m, const void *buf, uint64_t count, loom_dtype dtype,
                                        int32_t peer, Layout *out, const CountLimit &limit = {}) noexcept {
  *out = Layout{};
  LOOM_CXX_TRY(check_data(dtype, count, op, &out->bytes, limit));
  LOOM_CXX_TRY(check_rank(m.size, peer, op, "peer"));
  return check_buffer(buf, count, op, "buf");
}

}  // namespace cxx
}  // namespace loom

#endif  // LOOM_CXX_CHECKS_HPP
