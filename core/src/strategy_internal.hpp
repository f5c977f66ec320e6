// SPDX-License-Identifier: Apache-2.0
// What the host needs to build Strategy handles. Internal to libloom.
#pragma once

#include <memory>

#include "host_services.hpp"
#include "loom/strategy.hpp"
#include "plugin_loader.hpp"

namespace loom {

// The built-in `single` strategy as if it had been loaded from a file.
LoadedPlugin builtin_single_strategy();

// A handle that owns the plugin's host services and calls fini at the end.
std::shared_ptr<Strategy> make_hosted_strategy(const LoadedPlugin& plugin, std::unique_ptr<PluginHostContext> services,
                                               loom_strategy_ctx* ctx);

}  // namespace loom
