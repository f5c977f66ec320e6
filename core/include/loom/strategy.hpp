// SPDX-License-Identifier: Apache-2.0
// loom/strategy.hpp: a C++ handle over a strategy plugin's C vtable (or the
// built-in `single` strategy). Destroying it calls the plugin's fini; the
// trainer calls setup and teardown. Methods return Status; one thread at a
// time, as loom/strategy.h requires.
#pragma once

#include <cstdint>
#include <string>

#include "loom/plugin_record.hpp"
#include "loom/status.hpp"
#include "loom/strategy.h"

namespace loom {

class Strategy {
 public:
  virtual ~Strategy() = default;

  const PluginDescriptor& descriptor() const { return descriptor_; }
  const std::string& path() const { return path_; }  // "(built in)" for single

  Status setup(const loom_training_state_v1& state);
  Status teardown();
  Status data_shard(int32_t* index, int32_t* count);
  // *apply: step the optimizer now with the gradients in the buffers.
  Status after_backward(uint64_t local_samples, bool* apply);
  Status after_optimizer_step();
  Status reduce_metric(double* value, loom_metric_op op);
  Status reduce_decision(bool* decision, bool all);
  Status barrier();
  Status broadcast_bytes(void* data, uint64_t len, int32_t root);
  bool is_global_zero() const;
  int64_t global_step() const;
  bool should_stop() const;
  std::string status_line() const;
  // Loads the newest state the other processes hold, now (ABI 1.8; a swarm
  // peer downloads a donor's). UNSUPPORTED when the strategy has no
  // load_state; UNAVAILABLE when none could be loaded.
  Status load_state();
  // Mixed into the trainer's sampling seed (ABI 1.1; 0 for 1.0 plugins).
  uint64_t sample_salt() const;
  // When the strategy failed because the host could not open a plugin it
  // asked for (its collective), that error, with its exit code; else null.
  virtual const Error* host_error() const { return nullptr; }

 protected:
  Strategy(const loom_strategy_v1* vtable, loom_strategy_ctx* ctx, PluginDescriptor descriptor, std::string path)
      : vtable_(vtable), ctx_(ctx), descriptor_(std::move(descriptor)), path_(std::move(path)) {}
  Status result(loom_status code, const char* call) const;

  const loom_strategy_v1* vtable_;
  loom_strategy_ctx* ctx_;
  PluginDescriptor descriptor_;
  std::string path_;
};

}  // namespace loom
