// SPDX-License-Identifier: Apache-2.0
// Thread-local error messages.
#include "error.h"

#include <cstdarg>
#include <cstdio>

namespace loom_ddp {
namespace {
// A plain array: no constructor, no destructor registration, no allocation,
// so it is safe in a dlopen'ed object and on any thread. Large enough for our
// own context plus the collective plugin's message.
thread_local char t_message[2048] = "no error";
}  // namespace

loom_status fail(loom_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(t_message, sizeof t_message, fmt, ap);
  va_end(ap);
  return s;
}

const char *last_error_text() { return t_message; }

}  // namespace loom_ddp
