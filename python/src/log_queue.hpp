// SPDX-License-Identifier: Apache-2.0
// Loom's log (spdlog: the host's and the plugins' messages, from any thread)
// held in a queue that Python drains into its `logging` on the thread that
// calls into Loom. No Python is ever called from a plugin's thread, so a
// thread that logs never waits for the GIL.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace loom::python {

// Sends spdlog's default logger into the queue (idempotent).
void capture_logs();
// The messages since the last drain: (Python logging level, text).
std::vector<std::pair<int, std::string>> drain_logs();

}  // namespace loom::python
