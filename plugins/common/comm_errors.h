/* SPDX-License-Identifier: Apache-2.0 */
// Per-communicator error text (ABI 1.7's comm_last_error) for a plugin whose
// failures already land in a per-thread message: each operation, test and
// wait is wrapped so that, when it fails, that message is copied into the
// communicator it concerned. Calls on one communicator are serialised by the
// caller (collective.h), so the copy needs no lock. Header-only; nothing is
// exported.
//
// The plugin's loom_comm has a member `loom_plugin_common::CommError error`
// and its loom_request a member `loom_comm *comm`; Text is its "calling
// thread's last message" function. In the vtable:
//
//   using Errors = loom_plugin_common::CommErrors<last_error_text>;
//   v.allreduce = Errors::On<allreduce>::call;   ... and test, wait
//   v.comm_last_error = Errors::last;
#ifndef LOOM_PLUGINS_COMMON_COMM_ERRORS_H
#define LOOM_PLUGINS_COMMON_COMM_ERRORS_H

#include <cstdio>

#include "loom/collective.h"

namespace loom_plugin_common {

struct CommError {
  char text[512] = "no error";
  void keep(const char *message) noexcept { std::snprintf(text, sizeof text, "%s", message ? message : "no message"); }
};

// Comm and Request are the plugin's loom_comm and loom_request, as template
// parameters so that they need to be complete only where this is used.
template <const char *(*Text)(), class Comm = loom_comm, class Request = loom_request>
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

}  // namespace loom_plugin_common

#endif  // LOOM_PLUGINS_COMMON_COMM_ERRORS_H
