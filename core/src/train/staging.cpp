// SPDX-License-Identifier: Apache-2.0
#include "staging.hpp"

#include "lent_state.hpp"
#include "loom/status.hpp"

namespace loom::train {
namespace {

// Pinned host memory when the device is a GPU: copies to and from it are
// DMA transfers, not staged again by the driver.
torch::Tensor host_like(const torch::Tensor& t) {
  auto options = t.options().device(torch::kCPU);
  if (t.is_cuda()) options = options.pinned_memory(true);
  return torch::empty(t.sizes(), options);
}

DLTensor host_view(const DLTensor& device_view, const torch::Tensor& host, std::vector<int64_t>& shape) {
  shape = host.sizes().vec();
  DLTensor v = device_view;  // dtype
  v.data = host.data_ptr();
  v.device = DLDevice{kDLCPU, 0};
  v.ndim = static_cast<int32_t>(shape.size());
  v.shape = shape.data();
  v.strides = nullptr;
  v.byte_offset = 0;
  return v;
}

}  // namespace

HostStaging::HostStaging(TrainingState& state) : state_(state) {
  const loom_training_state_v1& dev = state.abi_view();
  for (const auto& p : state.params()) params_.push_back(host_like(p));
  for (const auto& g : state.grad_buffers()) grad_buffers_.push_back(host_like(g));
  for (const auto& [name, b] : state.buffers()) {
    if (!b.is_floating_point()) continue;  // as TrainingState::buffer_views lends them
    device_buffers_.push_back(b);
    buffers_.push_back(host_like(b));
  }
  // A gradient's place in its host buffer is its place in the device's.
  shapes_.resize(params_.size());
  std::vector<std::vector<int64_t>> grad_shapes(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    param_views_.push_back(host_view(dev.params[i], params_[i], shapes_[i]));
    const torch::Tensor& g = state.params()[i].grad();
    size_t k = 0;  // the flat buffer of its dtype (TrainingState keeps one per dtype)
    while (k < grad_buffers_.size() && grad_buffers_[k].scalar_type() != g.scalar_type()) ++k;
    if (k == grad_buffers_.size() || g.storage().data() != state.grad_buffers()[k].storage().data())
      throw Error::runtime("host staging: a gradient is not in the flat gradient buffers");
    DLTensor v = param_views_.back();
    v.data = static_cast<char*>(grad_buffers_[k].data_ptr()) +
             (g.storage_offset() - state.grad_buffers()[k].storage_offset()) * g.element_size();
    grad_views_.push_back(v);
  }
  view_ = dev;  // sizes, steps, description
  view_.struct_size = sizeof view_;
  view_.params = param_views_.data();
  view_.grads = grad_views_.data();
  // The lent state is host memory: the device services work there.
  lent::fill_callbacks<HostStaging, &HostStaging::optimizer_views, &HostStaging::buffer_views>(*this, &view_);
  pull();
}

size_t HostStaging::bytes() const {
  size_t n = 0;
  for (const auto* list : {&params_, &grad_buffers_, &buffers_})
    for (const auto& t : *list) n += t.numel() * t.element_size();
  return n;
}

void HostStaging::pull() {
  torch::NoGradGuard guard;
  for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(state_.params()[i]);
  for (size_t i = 0; i < grad_buffers_.size(); ++i) grad_buffers_[i].copy_(state_.grad_buffers()[i]);
  for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].copy_(device_buffers_[i]);
  opt_device_.clear();
  opt_host_.clear();
}

void HostStaging::push() {
  torch::NoGradGuard guard;
  for (size_t i = 0; i < params_.size(); ++i) state_.params()[i].copy_(params_[i]);
  for (size_t i = 0; i < grad_buffers_.size(); ++i) state_.grad_buffers()[i].copy_(grad_buffers_[i]);
  for (size_t i = 0; i < buffers_.size(); ++i) device_buffers_[i].copy_(buffers_[i]);
  for (size_t i = 0; i < opt_host_.size(); ++i) opt_device_[i].copy_(opt_host_[i]);
}

const std::vector<DLTensor>& HostStaging::buffer_views() {
  buffer_views_.clear();
  buffer_shapes_.assign(buffers_.size(), {});
  const std::vector<DLTensor>& dev = state_.buffer_views();  // the same floating-point buffers, in order
  for (size_t i = 0; i < buffers_.size(); ++i) buffer_views_.push_back(host_view(dev[i], buffers_[i], buffer_shapes_[i]));
  return buffer_views_;
}

const std::vector<DLTensor>& HostStaging::optimizer_views() {
  // The statistics change tensors when the optimizer state is loaded: lent
  // afresh each call, copied back by push().
  const std::vector<DLTensor>& dev = state_.optimizer_views();
  opt_device_ = state_.optimizer_tensors();
  opt_host_.clear();
  opt_views_.clear();
  opt_shapes_.assign(opt_device_.size(), {});
  torch::NoGradGuard guard;
  for (size_t i = 0; i < opt_device_.size(); ++i) {
    opt_host_.push_back(host_like(opt_device_[i]));
    opt_host_.back().copy_(opt_device_[i]);
    opt_views_.push_back(host_view(dev[i], opt_host_.back(), opt_shapes_[i]));
  }
  return opt_views_;
}

void HostStaging::snapshot_into(std::string& out) {
  push();  // within a call, the host copies are what the strategy sees
  state_.snapshot_into(out);
}

void HostStaging::restore(const char* data, size_t len) {
  push();  // a refused state leaves the strategy's view as it was
  state_.restore(data, len);
  pull();
}

}  // namespace loom::train
