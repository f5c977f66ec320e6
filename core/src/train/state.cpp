// SPDX-License-Identifier: Apache-2.0
#include "state.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <type_traits>
#include <sstream>

#include "huge_pages.h"
#include "lent_state.hpp"
#include "optimizer_stats.hpp"
#include "state_format.hpp"
#include "loom/status.hpp"

namespace loom::train {
using namespace detail;
namespace {

DLDataType dl_dtype(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat: return {kDLFloat, 32, 1};
    case torch::kDouble: return {kDLFloat, 64, 1};
    case torch::kHalf: return {kDLFloat, 16, 1};
    case torch::kBFloat16: return {kDLBfloat, 16, 1};
    default:
      throw Error::usage(std::string(c10::toString(t.scalar_type())) +
                         " tensors are not trained; valid dtypes: Float (float32), Double, Half, BFloat16");
  }
}

DLDevice dl_device(const torch::Tensor& t) {
  return t.is_cuda() ? DLDevice{kDLCUDA, static_cast<int32_t>(t.device().index())} : DLDevice{kDLCPU, 0};
}

DLTensor view_of(const torch::Tensor& t, std::vector<int64_t>& shape) {
  shape = t.sizes().vec();
  DLTensor v{};
  v.data = t.data_ptr();
  v.device = dl_device(t);
  v.ndim = static_cast<int32_t>(shape.size());
  v.dtype = dl_dtype(t);
  v.shape = shape.data();
  return v;
}

// Tensor `prefix`<i> of a state, which must have the dtype and shape of
// `mine` (named `what` in the message).
torch::Tensor read_fitting(torch::serialize::InputArchive& archive, const char* prefix, size_t i, const std::string& what,
                           const torch::Tensor& mine) {
  torch::Tensor t;
  archive.read(prefix + std::to_string(i), t);
  if (!t.sizes().equals(mine.sizes()) || t.scalar_type() != mine.scalar_type()) {
    throw Error::usage(what + " is " + c10::toString(t.scalar_type()) + " " + c10::str(t.sizes()) + " in the state, " +
                       c10::toString(mine.scalar_type()) + " " + c10::str(mine.sizes()) + " in this model");
  }
  return t;
}

// A zeroed 1-D tensor; on the CPU, in huge pages (plugins/common/
// huge_pages.h): the gradient buffer is what collectives read across
// processes and reduce into.
torch::Tensor flat_zeros(int64_t numel, const torch::TensorOptions& options) {
  const size_t bytes = size_t(numel) * c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
  if (!options.device().is_cpu()) return torch::zeros({numel}, options);
  void* p = loom_plugin_common::allocate_huge(bytes);
  std::memset(p, 0, bytes);
  return torch::from_blob(p, {numel}, [](void* q) { std::free(q); }, options);
}

}  // namespace

namespace {
std::vector<torch::Tensor> parameters_of(Task& task) {
  std::vector<torch::Tensor> out;
  for (auto& [name, tensor] : task.parameters()) out.push_back(tensor);
  if (out.empty()) throw Error::usage("task '" + task.name() + "' has no parameters to train");
  return out;
}
}  // namespace

TrainingState::TrainingState(Task& task, const TrainerSettings& s)
    : task_(task), params_(parameters_of(task)), buffers_(task.buffers()), memory_(params_.front().device()) {
  for (auto& [name, tensor] : task.parameters()) names_.push_back(name);
  // Before any gradient buffer is made of their type.
  for (size_t i = 0; i < params_.size(); ++i) {
    try {
      (void)dl_dtype(params_[i]);
    } catch (const Error& e) {
      throw Error::usage("parameter '" + names_[i] + "': " + e.what());
    }
  }
  // Gradient buffers exist from the start and are only ever zeroed in place,
  // so the views handed to the strategy stay valid (backward accumulates into
  // an existing .grad in place). They are slices of one flat buffer per
  // dtype, laid out in reverse parameter order, the order in which backward
  // produces them and DDP buckets them: a bucket is then one contiguous
  // range a collective can reduce in place, with no copies.
  std::map<c10::ScalarType, int64_t> totals;
  for (auto& p : params_) totals[p.scalar_type()] += p.numel();
  std::map<c10::ScalarType, std::pair<torch::Tensor, int64_t>> flats;  // buffer, next offset
  for (auto& [type, total] : totals) flats[type] = {flat_zeros(total, params_.front().options().dtype(type)), 0};
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    auto& [flat, offset] = flats[it->scalar_type()];
    it->mutable_grad() = flat.narrow(0, offset, it->numel()).view(it->sizes());
    offset += it->numel();
  }
  for (auto& [type, entry] : flats) grad_buffers_.push_back(entry.first);
  if (s.optimizer == "sgd") {
    optimizer_ = std::make_unique<torch::optim::SGD>(
        params_, torch::optim::SGDOptions(s.lr).momentum(s.momentum).weight_decay(s.weight_decay));
  } else if (s.optimizer == "adamw") {
    optimizer_ = std::make_unique<torch::optim::AdamW>(params_, torch::optim::AdamWOptions(s.lr).weight_decay(s.weight_decay));
  } else {
    optimizer_ = std::make_unique<torch::optim::Adam>(params_, torch::optim::AdamOptions(s.lr).weight_decay(s.weight_decay));
  }
  shapes_.reserve(params_.size());
  for (auto& p : params_) {
    if (!p.is_contiguous()) throw Error::runtime("parameter is not contiguous");
    shapes_.emplace_back();
    DLTensor v = view_of(p, shapes_.back());
    param_views_.push_back(v);
    v.data = p.grad().data_ptr();  // same shape and dtype
    grad_views_.push_back(v);
    grad_data_.push_back(v.data);
  }
  view_.struct_size = sizeof view_;
  view_.num_params = static_cast<uint32_t>(params_.size());
  view_.params = param_views_.data();
  view_.grads = grad_views_.data();
  view_.batch_size = static_cast<uint64_t>(s.batch_size);
  view_.max_steps = s.max_steps;
  description_ = describe_training(task.name(), names_, params_, buffers_, s);
  view_.description = description_.c_str();
  lent::fill_callbacks<TrainingState, &TrainingState::optimizer_views, &TrainingState::buffer_views>(*this, &view_);
}

std::string describe_training(const std::string& task, const std::vector<std::string>& param_names,
                              const std::vector<torch::Tensor>& params, const std::vector<NamedTensor>& buffers,
                              const TrainerSettings& s) {
  auto shape = [](const torch::Tensor& t) {
    std::string out = "[";
    for (int64_t d = 0; d < t.dim(); ++d) out += (d ? ", " : "") + std::to_string(t.size(d));
    return out + "]";
  };
  std::string out = "task " + task + "\n";
  for (size_t i = 0; i < params.size(); ++i)
    out += "parameter '" + param_names[i] + "': " + c10::toString(params[i].scalar_type()) + " " + shape(params[i]) + "\n";
  for (const auto& [name, t] : buffers)
    out += "buffer '" + name + "': " + c10::toString(t.scalar_type()) + " " + shape(t) + "\n";
  // The statistics the optimizer keeps per parameter: what state averaging
  // and snapshots carry. Learning rates and decay may differ between
  // processes; the layout may not.
  std::string layout = s.optimizer == "sgd" ? (s.momentum != 0 ? "momentum_buffer" : "none") : "exp_avg, exp_avg_sq";
  out += "optimizer: " + s.optimizer + " (state per parameter: " + layout + ")\n";
  return out;
}

const std::vector<DLTensor>& TrainingState::buffer_views() {
  buffer_views_.clear();
  buffer_shapes_.assign(buffers_.size(), {});
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const torch::Tensor& t = buffers_[i].second;
    if (!t.is_floating_point()) continue;  // counters (num_batches_tracked) are not averaged
    if (!t.is_contiguous()) throw Error::runtime("buffer " + buffers_[i].first + " is not contiguous");
    buffer_views_.push_back(view_of(t, buffer_shapes_[i]));
  }
  return buffer_views_;
}

const std::vector<DLTensor>& TrainingState::optimizer_views() {
  opt_tensors_.clear();
  auto& state = optimizer_->state();
  for (auto& p : params_) {
    auto it = find_param_state(state, p);
    if (it == state.end()) continue;  // no step yet
    for (torch::Tensor* t : statistics(it->second.get())) opt_tensors_.push_back(*t);
  }
  // amsgrad's maximum and a momentum-free SGD's buffer are undefined.
  opt_tensors_.erase(std::remove_if(opt_tensors_.begin(), opt_tensors_.end(), [](const torch::Tensor& t) { return !t.defined(); }),
                     opt_tensors_.end());
  opt_views_.clear();
  opt_shapes_.clear();
  opt_shapes_.reserve(opt_tensors_.size());
  for (auto& t : opt_tensors_) {
    if (!t.is_contiguous()) throw Error::runtime("an optimizer statistic is not contiguous");
    opt_shapes_.emplace_back();
    opt_views_.push_back(view_of(t, opt_shapes_.back()));
  }
  return opt_views_;
}

torch::optim::OptimizerParamState& TrainingState::param_state(
    size_t i, const std::function<torch::Tensor(const torch::Tensor&)>& make) {
  const torch::Tensor& p = params_.at(i);
  auto& state = optimizer_->state();
  auto it = find_param_state(state, p);
  if (it != state.end()) return *it->second;
  auto statistic = [&make](const torch::Tensor& q) {
    return make ? make(q) : torch::zeros_like(q, torch::MemoryFormat::Contiguous);
  };
  // What LibTorch's step() creates for a parameter without state.
  std::unique_ptr<torch::optim::OptimizerParamState> fresh;
  if (dynamic_cast<torch::optim::SGD*>(optimizer_.get())) {
    auto sgd = std::make_unique<torch::optim::SGDParamState>();
    const auto& options = static_cast<const torch::optim::SGDOptions&>(optimizer_->param_groups().at(0).options());
    if (options.momentum() != 0) sgd->momentum_buffer(statistic(p));
    fresh = std::move(sgd);
  } else if (dynamic_cast<torch::optim::AdamW*>(optimizer_.get())) {
    auto adamw = std::make_unique<torch::optim::AdamWParamState>();
    adamw->step(0);
    adamw->exp_avg(statistic(p));
    adamw->exp_avg_sq(statistic(p));
    fresh = std::move(adamw);
  } else {
    auto adam = std::make_unique<torch::optim::AdamParamState>();
    adam->step(0);
    adam->exp_avg(statistic(p));
    adam->exp_avg_sq(statistic(p));
    fresh = std::move(adam);
  }
  return *state.emplace(state_key<std::remove_reference_t<decltype(state)>>(p), std::move(fresh)).first->second;
}

std::vector<std::vector<torch::Tensor>> TrainingState::init_optimizer_state() {
  torch::NoGradGuard guard;
  shared_statistics_ = true;
  std::vector<std::vector<torch::Tensor>> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    std::vector<torch::Tensor> mine;
    for (torch::Tensor* t : statistics(&param_state(i)))
      if (t->defined()) mine.push_back(*t);
    out.push_back(std::move(mine));
  }
  return out;
}

void TrainingState::describe_optimizer(const std::string& line) {
  const auto at = description_.rfind("optimizer: ");
  description_ = description_.substr(0, at) + "optimizer: " + line + "\n";
  view_.description = description_.c_str();
}

void TrainingState::set_lr(double lr) {
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
}

void TrainingState::zero_grads() {
  torch::NoGradGuard guard;
  for (auto& buffer : grad_buffers_) buffer.zero_();
}

bool TrainingState::grads_finite() const {
  for (const auto& buffer : grad_buffers_) {
    if (!torch::isfinite(buffer).all().item<bool>()) return false;
  }
  return true;
}

void TrainingState::check_views() const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].grad().data_ptr() != grad_data_[i]) {
      throw Error::runtime("gradient buffer of parameter " + names_[i] + " was replaced during backward");
    }
  }
}

void TrainingState::sync_step_counters() const {
  if (step_counters_.empty()) return;
  auto& state = optimizer_->state();
  for (size_t i = 0; i < params_.size() && i < step_counters_.size(); ++i) {
    auto it = find_param_state(state, params_[i]);
    if (it == state.end()) continue;
    const auto count = static_cast<int64_t>(std::llround(step_counters_[i].item<double>()));
    with_step(it->second.get(), [&](auto& st) { st.step(count); });
  }
}

std::string TrainingState::snapshot() const {
  std::string out;
  snapshot_into(out);
  return out;
}

void TrainingState::restore(const char* data, size_t len) {
  if (is_raw_state(data, len)) return restore_raw(data, len);
  restore_archive(data, len);
}

// loom-state-1: a LibTorch archive (what checkpoints held before the raw
// format); read so that those runs still resume.
void TrainingState::restore_archive(const char* data, size_t len) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(data, len, params_.front().device());  // a state saved on another device (a GPU peer's) lands on this one
  } catch (const std::exception& e) {
    throw Error::usage(std::string("not a Loom training state: ") + e.what());
  }
  c10::IValue format, task, step_value, count;
  try {
    archive.read("format", format);
    archive.read("task", task);
    archive.read("step", step_value);
    archive.read("count", count);
  } catch (const std::exception&) {
    throw Error::usage("not a Loom training state (missing its header)");
  }
  if (!format.isString() || format.toStringRef() != "loom-state-1") throw Error::usage("unknown training state format");
  if (task.toStringRef() != task_.name()) {
    throw Error::usage("the state is of task '" + task.toStringRef() + "', this run trains '" + task_.name() + "'");
  }
  if (count.toInt() != static_cast<int64_t>(params_.size())) {
    throw Error::usage("the state has " + std::to_string(count.toInt()) + " parameters, this model " +
                       std::to_string(params_.size()));
  }
  std::vector<torch::Tensor> loaded(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) loaded[i] = read_fitting(archive, "p", i, "parameter " + names_[i], params_[i]);
  // Buffers: none in states written before they were saved (loom-state-1
  // without "buffers"), which fits only a model without any.
  c10::IValue buffer_count;
  if (!archive.try_read("buffers", buffer_count)) buffer_count = c10::IValue(int64_t{0});
  if (buffer_count.toInt() != static_cast<int64_t>(buffers_.size())) {
    throw Error::usage("the state has " + std::to_string(buffer_count.toInt()) + " buffers, this model " +
                       std::to_string(buffers_.size()));
  }
  std::vector<torch::Tensor> loaded_buffers(buffers_.size());
  for (size_t i = 0; i < buffers_.size(); ++i) {
    loaded_buffers[i] = read_fitting(archive, "b", i, "buffer " + buffers_[i].first, buffers_[i].second);
  }
  torch::serialize::InputArchive opt;
  archive.read("optimizer", opt);
  // Copy in place (the strategy holds views of these tensors); if the
  // optimizer state does not load, put the parameters back as they were.
  torch::NoGradGuard guard;
  std::vector<torch::Tensor> before;
  for (auto& p : params_) before.push_back(p.clone());
  for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(loaded[i]);
  // Loading replaces the optimizer's state tensors. Where another optimizer
  // shares them (init_optimizer_state: python/), the values go back into
  // the tensors it holds; loom train's own optimizer needs no such copy.
  auto& state = optimizer_->state();
  std::vector<std::vector<torch::Tensor>> held(params_.size());
  for (size_t i = 0; shared_statistics_ && i < params_.size(); ++i) {
    auto it = find_param_state(state, params_[i]);
    if (it != state.end())
      for (torch::Tensor* t : statistics(it->second.get())) held[i].push_back(*t);
  }
  try {
    optimizer_->load(opt);
  } catch (const std::exception& e) {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(before[i]);
    throw Error::usage(std::string("the optimizer state does not fit this run: ") + e.what());
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    auto it = find_param_state(state, params_[i]);
    if (it == state.end()) continue;
    auto loaded = statistics(it->second.get());
    for (size_t k = 0; k < loaded.size() && k < held[i].size(); ++k) {
      if (!held[i][k].defined() || !loaded[k]->defined() || !held[i][k].sizes().equals(loaded[k]->sizes())) continue;
      held[i][k].copy_(*loaded[k]);
      *loaded[k] = held[i][k];
    }
    if (i < step_counters_.size()) with_step(it->second.get(), [&](auto& st) { step_counters_[i].fill_(double(st.step())); });
  }
  for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].second.copy_(loaded_buffers[i]);
  step = step_value.toInt();
}

}  // namespace loom::train
