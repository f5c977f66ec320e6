// SPDX-License-Identifier: Apache-2.0
// Loom C++ plugin layer: error reporting. Optional and header-only: a plugin
// written in C++17 may use it on top of the C ABI (plugin.h), which it does
// not change. Nothing here may be exported: build with the SDK's version
// script (cmake/plugin.map, which hides every symbol but the entry) or
// -fvisibility=hidden, so that two plugins in one process each keep their
// own copy of the thread's message below.
//
// The rules it implements, from plugin.h and collective.h:
//  - a failing call leaves a message for last_error, per calling thread, that
//    stays valid until that thread's next failure (fail, last_error_text);
//  - nothing may unwind across the C ABI (guarded);
//  - since ABI 1.7, a failed post, test or wait also leaves its message in
//    the communicator it concerned, for comm_last_error (CommErrors).
#ifndef LOOM_CXX_ERRORS_HPP
#define LOOM_CXX_ERRORS_HPP

#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <new>

#include "loom/collective.h"
#include "loom/plugin.h"

#if defined(__GNUC__) || defined(__clang__)
#define LOOM_CXX_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define LOOM_CXX_PRINTF(fmt_index, first_arg)
#endif

namespace loom {
namespace cxx {

// Room for a plugin's own context plus a message quoted from a plugin it
// calls (a strategy quoting its collective); longer messages are truncated.
inline constexpr std::size_t kErrorTextSize = 2048;

namespace detail {
// A plain array: no constructor, no destructor registration, no allocation,
// so it is safe in a dlopen'ed object and on any thread.
inline thread_local char t_last_error[kErrorTextSize] = "no error";
}  // namespace detail

// Formats a message into the calling thread's error text and returns s, so
// that `return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: comm is NULL", op);`
// both reports and answers.
inline loom_status fail(loom_status s, const char *fmt, ...) LOOM_CXX_PRINTF(2, 3);
inline loom_status fail(loom_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(detail::t_last_error, sizeof detail::t_last_error, fmt, ap);
  va_end(ap);
  return s;
}

// The calling thread's last message; never NULL, lives until its next
// failure. What a plugin's last_error returns.
// Out of line: a caller that quotes it into a smaller buffer means to
// truncate, and GCC would otherwise warn, seeing the buffer's size.
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
inline const char *last_error_text() noexcept {
  return detail::t_last_error;
}

// Returns from the enclosing function when expr is not LOOM_OK.
#define LOOM_CXX_TRY(expr)                                  \
  do {                                                      \
    const loom_status loom_cxx_try_s_ = (expr);             \
    if (loom_cxx_try_s_ != LOOM_OK) return loom_cxx_try_s_; \
  } while (0)

// Runs body (returning loom_status) and turns any escaping exception into a
// status with a message: nothing may unwind across the C ABI. bad_alloc is
// the system's (SYSTEM); anything else is the plugin's own bug (INTERNAL).
template <class Body>
loom_status guarded(Body &&body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(LOOM_ERR_SYSTEM, "out of memory");
  } catch (const std::exception &e) {
    return fail(LOOM_ERR_INTERNAL, "unexpected exception: %s", e.what());
  } catch (...) {
    return fail(LOOM_ERR_INTERNAL, "unexpected exception of unknown type");
  }
}

// A vtable init: clears *ctx, runs body (which creates the instance and
// stores it in *ctx) under guarded, and on failure copies the message into
// the host's why buffer, as plugin.h asks of init.
template <class Ctx, class Body>
loom_status guarded_init(Ctx **ctx, char *why, std::size_t why_len, Body &&body) noexcept {
  if (ctx) *ctx = nullptr;
  const loom_status s = guarded(body);
  if (s != LOOM_OK && why && why_len > 0) std::snprintf(why, why_len, "%s", last_error_text());
  return s;
}

// Formats one message into the host's log (loom_host_v1.log); dropped when
// the host gave no log. Ctx is the plugin's instance, with a member
// `loom_host_v1 host` (its copy of the host's table).
template <class Ctx>
void host_log(const Ctx *ctx, loom_log_level level, const char *fmt, ...) LOOM_CXX_PRINTF(3, 4);
template <class Ctx>
void host_log(const Ctx *ctx, loom_log_level level, const char *fmt, ...) {
  if (!ctx || !ctx->host.log) return;
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  ctx->host.log(ctx->host.host_ctx, level, text);
}

// One communicator's last message (ABI 1.7's comm_last_error): a member
// `loom::cxx::CommError error;` of the plugin's loom_comm.
struct CommError {
  char text[512] = "no error";
  // Copies message, truncated to fit (a plain loop: the thread's text may be
  // longer than this, which is expected, not a formatting mistake).
  void keep(const char *message) noexcept {
    if (!message) message = "no message";
    std::size_t n = 0;
    for (; n + 1 < sizeof text && message[n] != '\0'; ++n) text[n] = message[n];
    text[n] = '\0';
  }
};

// Wraps operations so that, when one fails, the thread's message is copied
// into the communicator it concerned. Calls on one communicator are
// serialised by the caller (collective.h), so the copy needs no lock. The
// plugin's loom_comm has a member `CommError error` and its loom_request a
// member `loom_comm *comm`; Text is the thread's message. In a vtable:
//
//   using Errors = loom::cxx::CommErrors<>;
//   v.allreduce = Errors::On<allreduce>::call;   ... and test, wait
//   v.comm_last_error = Errors::last;
//
// (LOOM_CXX_COLLECTIVE_VTABLE in loom/cxx/collective.hpp does all of it.)
// Comm and Request are template parameters so that they need to be complete
// only where this is used. The wrapped functions must be noexcept.
template <const char *(*Text)() = last_error_text, class Comm = loom_comm, class Request = loom_request>
struct CommErrors {
  template <auto Fn>
  struct On;

  // Posts: the communicator is the first argument.
  template <class... A, loom_status (*Fn)(Comm *, A...) noexcept>
  struct On<Fn> {
    static loom_status call(Comm *comm, A... args) noexcept {
      const loom_status s = Fn(comm, args...);
      if (s != LOOM_OK && comm) comm->error.keep(Text());
      return s;
    }
  };

  // test and wait: the request knows its communicator.
  template <class... A, loom_status (*Fn)(Request *, A...) noexcept>
  struct On<Fn> {
    static loom_status call(Request *request, A... args) noexcept {
      const loom_status s = Fn(request, args...);
      if (s != LOOM_OK && request && request->comm) request->comm->error.keep(Text());
      return s;
    }
  };

  static const char *last(Comm *comm) noexcept { return comm ? comm->error.text : "comm is NULL"; }
};

}  // namespace cxx
}  // namespace loom

#endif  // LOOM_CXX_ERRORS_HPP
