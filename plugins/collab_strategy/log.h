/* SPDX-License-Identifier: Apache-2.0 */
// Logging for the collab modules: they report through a callback so that
// they stay testable without a host; the strategy routes it to host->log.
#ifndef LOOM_COLLAB_LOG_H
#define LOOM_COLLAB_LOG_H

#include <functional>
#include <string>

namespace loom_collab {

enum class Level { debug = 1, info = 2, warn = 3, error = 4 };  // loom_log_level's values
using LogFn = std::function<void(Level, const std::string &)>;

}  // namespace loom_collab

#endif
