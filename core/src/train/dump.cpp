// SPDX-License-Identifier: Apache-2.0
#include "dump.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <numeric>

#include "files.hpp"
#include "schedule.hpp"
#include "state.hpp"

namespace loom::train {
namespace {

using json = nlohmann::json;

json write_tensor(const std::string& dir, const std::string& file, const torch::Tensor& t) {
  torch::Tensor c = t.detach().contiguous().cpu();
  std::ofstream out(dir + "/" + file, std::ios::binary);
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * c.element_size()));
  if (!out) throw Error::runtime("cannot write " + dir + "/" + file);
  return {{"file", file}, {"shape", c.sizes().vec()}, {"dtype", std::string(c10::toString(c.scalar_type()))}};
}

}  // namespace

void dump_run(const std::string& dir, Task& task, TrainingState& state, Sampler& sampler,
              const TrainerSettings& s, bool with_data) {
  make_dirs(dir);
  json manifest;
  manifest["task"] = task.name();
  manifest["trainer"] = {{"optimizer", s.optimizer}, {"lr", s.lr},           {"momentum", s.momentum},
                         {"weight_decay", s.weight_decay}, {"schedule", s.schedule}, {"warmup_steps", s.warmup_steps},
                         {"max_steps", s.max_steps}, {"batch_size", s.batch_size}, {"accumulate", s.accumulate},
                         {"grad_clip", s.grad_clip}};
  json params = json::array();
  size_t i = 0;
  for (size_t k = 0; k < state.params().size(); ++k) {
    json p = write_tensor(dir, "param" + std::to_string(i++) + ".bin", state.params()[k]);
    p["name"] = state.param_names()[k];
    params.push_back(p);
  }
  manifest["params"] = params;
  json buffers = json::array();
  i = 0;
  for (const auto& [name, tensor] : state.buffers()) {
    json b = write_tensor(dir, "buffer" + std::to_string(i++) + ".bin", tensor);
    b["name"] = name;
    buffers.push_back(b);
  }
  manifest["buffers"] = buffers;
  // The optimizer's statistics as the strategy sees them (opt0, opt1, ...).
  json optimizer = json::array();
  i = 0;
  for (const DLTensor& v : state.optimizer_views()) {
    if (v.dtype.code != kDLFloat || v.dtype.bits != 32) continue;  // the readers take float32
    const auto sizes = c10::IntArrayRef(v.shape, static_cast<size_t>(v.ndim));
    json o = write_tensor(dir, "opt" + std::to_string(i) + ".bin", torch::from_blob(v.data, sizes, torch::kFloat));
    o["name"] = "opt" + std::to_string(i++);
    optimizer.push_back(o);
  }
  manifest["optimizer"] = optimizer;
  if (with_data) {
    // The samples themselves only when they are in memory; a streamed data
    // set is read from its own files.
    const Dataset& data = task.train_data();
    if (data.in_memory()) {
      std::vector<int64_t> all(static_cast<size_t>(data.size()));
      std::iota(all.begin(), all.end(), 0);
      Batch batch = data.get(all);
      if (batch.input.defined()) manifest["input"] = write_tensor(dir, "input.bin", batch.input);
      if (batch.target.defined()) manifest["target"] = write_tensor(dir, "target.bin", batch.target);
      i = 0;
      for (const auto& [name, tensor] : batch.fields) {
        manifest["fields"][name] = write_tensor(dir, "field" + std::to_string(i++) + ".bin", tensor);
      }
    }
    std::vector<int64_t> order;
    const int64_t micro_batches = s.max_steps * s.accumulate;
    for (int64_t u = 0; u < micro_batches; ++u) {
      auto b = sampler.batch(u);
      order.insert(order.end(), b.begin(), b.end());
    }
    manifest["batches"] = write_tensor(dir, "batches.bin", torch::tensor(order, torch::kLong).view({micro_batches, -1}));
  }
  write_file_atomically(dir + "/manifest.json", manifest.dump(2));
}

}  // namespace loom::train
