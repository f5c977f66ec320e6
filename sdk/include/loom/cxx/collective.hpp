// SPDX-License-Identifier: Apache-2.0
// Loom C++ plugin layer for collective backends: everything a C++17
// collective plugin shares with the others, on top of the C ABI
// (collective.h), which stays what the host sees. Header-only; nothing is
// exported but the entry function the macro below writes.
//
//   errors.hpp     fail, last_error_text, guarded, CommError / CommErrors
//   checks.hpp     the per-operation argument checks, in collective.h's order
//   options.hpp    typed reading of the declared options
//   negotiate.hpp  the entry's negotiation
//
// A plugin then holds only its backend's logic and, in one source file:
//
//   namespace my_backend {
//   constexpr loom_plugin_info kInfo = {...};
//   constexpr loom_collective_v1 kVtable = LOOM_CXX_COLLECTIVE_VTABLE(&kInfo);
//   }
//   LOOM_CXX_COLLECTIVE_ENTRY(my_backend::kVtable, "my")
#ifndef LOOM_CXX_COLLECTIVE_HPP
#define LOOM_CXX_COLLECTIVE_HPP

#include "loom/collective.h"
#include "loom/cxx/checks.hpp"
#include "loom/cxx/errors.hpp"
#include "loom/cxx/negotiate.hpp"
#include "loom/cxx/options.hpp"
#include "loom/plugin.h"

// Declares, in the namespace of the expansion, the ten operations
// LOOM_CXX_COLLECTIVE_VTABLE takes, each with collective.h's parameters and
// noexcept (a plugin's ops.h: the definitions are its backend).
#define LOOM_CXX_DECLARE_COLLECTIVE_OPS()                                                                        \
  loom_status allreduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,          \
                        loom_reduce_op op, loom_request **request) noexcept;                                      \
  loom_status allreduce_scaled(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,   \
                               double scale, loom_request **request) noexcept;                                    \
  loom_status broadcast(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,          \
                        int32_t root, loom_request **request) noexcept;                                           \
  loom_status reduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,             \
                     loom_reduce_op op, int32_t root, loom_request **request) noexcept;                           \
  loom_status allgather(loom_comm *comm, const void *send, void *recv, uint64_t sendcount, loom_dtype dtype,      \
                        loom_request **request) noexcept;                                                         \
  loom_status reduce_scatter(loom_comm *comm, const void *send, void *recv, uint64_t recvcount, loom_dtype dtype, \
                             loom_reduce_op op, loom_request **request) noexcept;                                 \
  loom_status alltoall(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,           \
                       loom_request **request) noexcept;                                                          \
  loom_status barrier(loom_comm *comm, loom_request **request) noexcept;                                         \
  loom_status send(loom_comm *comm, const void *buf, uint64_t count, loom_dtype dtype, int32_t peer,              \
                   loom_request **request) noexcept;                                                              \
  loom_status recv(loom_comm *comm, void *buf, uint64_t count, loom_dtype dtype, int32_t peer,                    \
                   loom_request **request) noexcept

// The full vtable of this SDK's ABI (every operation present, absent_ops 0)
// from the plugin's functions, found by their vtable names in the scope of
// the expansion: init, fini, last_error, comm_create, comm_destroy,
// comm_abort, allreduce, broadcast, reduce, allgather, reduce_scatter,
// alltoall, barrier, send, recv, test, wait, request_free,
// allreduce_scaled. Each operation, test and wait must be noexcept; they are
// wrapped by CommErrors (errors.hpp), so the plugin's loom_comm needs a
// `loom::cxx::CommError error` member and its loom_request a `loom_comm
// *comm`, and comm_last_error comes with it. A constant expression.
#define LOOM_CXX_COLLECTIVE_VTABLE(info_ptr)                                \
  [] {                                                                    \
    using loom_cxx_errors_ = ::loom::cxx::CommErrors<>;                   \
    loom_collective_v1 v{};                                               \
    v.struct_size = sizeof(loom_collective_v1);                           \
    v.abi_version = LOOM_ABI_VERSION;                                     \
    v.info = (info_ptr);                                                  \
    v.init = init;                                                        \
    v.fini = fini;                                                        \
    v.last_error = last_error;                                            \
    v.comm_create = comm_create;                                          \
    v.comm_destroy = comm_destroy;                                        \
    v.comm_abort = comm_abort;                                            \
    v.allreduce = loom_cxx_errors_::On<allreduce>::call;                  \
    v.broadcast = loom_cxx_errors_::On<broadcast>::call;                  \
    v.reduce = loom_cxx_errors_::On<reduce>::call;                        \
    v.allgather = loom_cxx_errors_::On<allgather>::call;                  \
    v.reduce_scatter = loom_cxx_errors_::On<reduce_scatter>::call;        \
    v.alltoall = loom_cxx_errors_::On<alltoall>::call;                    \
    v.barrier = loom_cxx_errors_::On<barrier>::call;                      \
    v.send = loom_cxx_errors_::On<send>::call;                            \
    v.recv = loom_cxx_errors_::On<recv>::call;                            \
    v.test = loom_cxx_errors_::On<test>::call;                            \
    v.wait = loom_cxx_errors_::On<wait>::call;                            \
    v.request_free = request_free;                                        \
    v.comm_last_error = loom_cxx_errors_::last;                           \
    v.absent_ops = 0;                                                     \
    v.allreduce_scaled = loom_cxx_errors_::On<allreduce_scaled>::call;    \
    return v;                                                             \
  }()

// The plugin's one exported symbol, loom_collective_plugin_v1: the
// negotiation (negotiate.hpp) answering with vtable (a static
// loom_collective_v1) or with refusals naming the plugin (name: a string
// literal, "mpi"). Write it at global scope, in one source file. The _SINCE
// form names the oldest ABI version the plugin speaks (default: 1.0).
#define LOOM_CXX_COLLECTIVE_ENTRY_SINCE(vtable, name, lowest)                                            \
  extern "C" LOOM_PLUGIN_EXPORT loom_status loom_collective_plugin_v1(const loom_negotiate_request *request, \
                                                                      loom_negotiate_reply *reply) {      \
    static constexpr ::loom::cxx::Refusals kLoomCxxRefusals =                                             \
        LOOM_CXX_REFUSALS(name " collective plugin", "collective");                                      \
    return ::loom::cxx::negotiate(request, reply, LOOM_KIND_COLLECTIVE, (lowest), &(vtable), kLoomCxxRefusals); \
  }
#define LOOM_CXX_COLLECTIVE_ENTRY(vtable, name) LOOM_CXX_COLLECTIVE_ENTRY_SINCE(vtable, name, LOOM_ABI_VERSION_MIN)

#endif  // LOOM_CXX_COLLECTIVE_HPP
