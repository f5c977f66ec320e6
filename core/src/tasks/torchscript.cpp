// SPDX-License-Identifier: Apache-2.0
// tasks/torchscript.cpp: the `torchscript` task: a user's model, written in
// PyTorch and saved with torch.jit.script(model).save(path) (or
// torch.jit.trace), trained on data files the user wrote with torch.save.
//
// The loss comes either from the module itself (loss = "module": forward
// takes the named input fields and returns the mean loss) or from a named
// loss applied to forward's output and a target field. The module's saved
// weights are the initial weights; the run's seed only orders the data.
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <filesystem>
#include <fstream>

#include "builtin.hpp"
#include "tensor_data.hpp"

namespace loom::train::tasks {
namespace {

// An exception's text without LibTorch's C++ backtrace, which tells a user
// nothing about their model.
std::string error_text(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

const std::vector<std::string> kLosses = {"cross_entropy", "mse", "bce_with_logits", "module"};

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Loads the module, telling apart the usual wrong files: a state_dict or
// tensors saved with torch.save, and files that are not PyTorch's at all.
torch::jit::Module load_module(const Options& options) {
  const std::string path = options.get_string("module");
  const std::string hint =
      "save the model in Python with torch.jit.script(model).save(path) (or torch.jit.trace(model, example).save(path))";
  if (path.empty()) throw options.invalid("module", "is required: the TorchScript file of the model; " + hint);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw options.invalid("module", "names '" + path + "', which is not a file; " + hint);
  }
  bool zip = false;
  {
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    zip = in.gcount() == 4 && std::string(magic, 4) == std::string("PK\x03\x04", 4);
  }
  if (!zip) throw options.invalid("module", "names '" + path + "', which is not a TorchScript file; " + hint);
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    if (!reader.hasRecord("constants.pkl") && reader.hasRecord("data.pkl")) {
      throw options.invalid("module", "names '" + path + "', which was written by torch.save (a state_dict or " +
                                          "tensors), not a TorchScript module; " + hint);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw options.invalid("module", "names '" + path + "', which is not a readable TorchScript file (" +
                                        excerpt(error_text(e), 300) + "); " + hint);
  }
  try {
    return torch::jit::load(path, torch::kCPU);
  } catch (const std::exception& e) {
    throw options.invalid("module", "names '" + path + "', which TorchScript could not load (" +
                                        excerpt(error_text(e), 2000) + "); " + hint);
  }
}

class TorchScriptTask : public Task {
 public:
  TorchScriptTask(const Options& options, uint64_t /*seed: the module carries its weights*/)
      : options_(options), module_(load_module(options)) {
    loss_ = options.get_string("loss");
    if (std::find(kLosses.begin(), kLosses.end(), loss_) == kLosses.end()) {
      throw options.invalid("loss", "must be one of " + join(kLosses) + ", got '" + excerpt(loss_) + "'");
    }
    inputs_ = options.get_list("inputs");
    if (inputs_.empty()) throw options.invalid("inputs", "must name at least one field passed to forward");
    std::vector<std::string> fields = inputs_;
    if (loss_ != "module") {
      target_ = options.get_string("target");
      if (target_.empty()) throw options.invalid("target", "must name the field compared with forward's output");
      if (std::find(fields.begin(), fields.end(), target_) == fields.end()) fields.push_back(target_);
    }
    eval_batch_ = options.get_int("eval_batch_size", 1, int64_t{1} << 20);
    jit_optimize_ = options.get_bool("jit_optimize");
    const std::string train = options.get_string("train");
    if (train.empty()) throw options.invalid("train", "is required: a torch.save'd dict of tensors, or a folder of them");
    train_ = open_tensor_dataset(train, fields, options.where("train") + "task.train");
    const std::string val = options.get_string("validation");
    if (!val.empty()) validation_ = open_tensor_dataset(val, fields, options.where("validation") + "task.validation");
    check_target_dtype();

    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      if (!p.value.is_floating_point()) {
        throw options.invalid("module", "has parameter '" + p.name + "' of type " +
                                            c10::toString(p.value.scalar_type()) + "; parameters must be floating point");
      }
      // Frozen parameters are kept with the buffers: saved and shared, not stepped.
      (p.value.requires_grad() ? params_ : frozen_).emplace_back(p.name, p.value);
    }
    if (params_.empty()) throw options.invalid("module", "has no trainable parameters (none requires grad)");
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) buffers_.emplace_back(b.name, b.value);
    buffers_.insert(buffers_.end(), frozen_.begin(), frozen_.end());
  }

  std::string name() const override { return "torchscript"; }
  std::vector<NamedTensor> parameters() override { return params_; }
  std::vector<NamedTensor> buffers() override { return buffers_; }
  void set_training(bool training) override { module_.train(training); }
  // torch::jit::Module::to moves each tensor's data in place, so params_
  // and buffers_ still name the module's own tensors.
  void to(const torch::Device& device) override {
    module_.to(device);
    device_ = device;
  }
  const Dataset& train_data() const override { return *train_; }
  const Dataset* validation_data() const override { return validation_.get(); }
  std::string headline_metric() const override { return classifies() ? "accuracy" : "loss"; }

  torch::Tensor loss(const Batch& batch) override {
    torch::Tensor out = forward(batch);
    if (loss_ == "module") return out;
    return apply_loss(out, batch.fields.at(target_).to(device_), at::Reduction::Mean);
  }

  Metrics evaluate(const Dataset& data) override {
    torch::NoGradGuard no_grad;
    double loss_sum = 0, correct = 0, counted = 0;
    const int64_t n = data.size();
    for (int64_t start = 0; start < n; start += eval_batch_) {
      std::vector<int64_t> indices;
      for (int64_t i = start; i < std::min(n, start + eval_batch_); ++i) indices.push_back(i);
      Batch batch = data.get(indices);
      torch::Tensor out = forward(batch);
      if (loss_ == "module") {
        loss_sum += out.item<double>() * double(batch.size);
        continue;
      }
      const torch::Tensor target = batch.fields.at(target_).to(device_);
      loss_sum += apply_loss(out, target, at::Reduction::Mean).item<double>() * double(batch.size);
      if (loss_ == "cross_entropy") {
        auto [scores, labels] = class_view(out, target);
        correct += scores.argmax(-1).eq(labels).sum().item<double>();
        counted += double(labels.numel());
      } else if (loss_ == "bce_with_logits") {
        correct += out.gt(0).eq(target.gt(0.5)).sum().item<double>();
        counted += double(target.numel());
      }
    }
    Metrics metrics{{"loss", n ? loss_sum / double(n) : 0.0}};
    if (classifies()) metrics["accuracy"] = counted > 0 ? correct / counted : 0.0;
    return metrics;
  }

 private:
  bool classifies() const { return loss_ == "cross_entropy" || loss_ == "bce_with_logits"; }

  // Scores with classes in the last dimension against integer labels:
  // [N, C] with [N], or [B, T, V] with [B, T], flattened.
  std::pair<torch::Tensor, torch::Tensor> class_view(const torch::Tensor& out, const torch::Tensor& target) const {
    if (out.dim() != target.dim() + 1 || out.sizes().slice(0, out.dim() - 1) != target.sizes()) {
      throw shape_error(out, target, "class scores with the classes in the last dimension: output [N, C] for target "
                                     "[N], or [B, T, C] for [B, T]");
    }
    return {out.reshape({-1, out.size(-1)}), target.reshape({-1}).to(torch::kLong)};
  }

  torch::Tensor apply_loss(const torch::Tensor& out, const torch::Tensor& target, at::Reduction::Reduction how) const {
    if (loss_ == "cross_entropy") {
      auto [scores, labels] = class_view(out, target);
      return torch::cross_entropy_loss(scores, labels, {}, how);
    }
    if (!out.sizes().equals(target.sizes())) {
      throw shape_error(out, target, "an output of the target's shape");
    }
    const torch::Tensor t = target.to(out.scalar_type());
    return loss_ == "mse" ? torch::mse_loss(out, t, how) : torch::binary_cross_entropy_with_logits(out, t, {}, {}, how);
  }

  Error shape_error(const torch::Tensor& out, const torch::Tensor& target, const std::string& wanted) const {
    return Error::usage("task.loss = \"" + loss_ + "\" needs " + wanted + "; forward returned " +
                        c10::str(out.sizes()) + " and field '" + target_ + "' is " + c10::str(target.sizes()));
  }

  // The target's dtype must suit the loss; known before the first batch.
  void check_target_dtype() const {
    if (loss_ == "module") return;
    const FieldSpec& spec = field_specs(*train_).at(target_);
    const bool integral = c10::isIntegralType(spec.dtype, /*includeBool=*/false);
    if (loss_ == "cross_entropy" && !integral) {
      throw options_.invalid("target", "names field '" + target_ + "', which is " + c10::toString(spec.dtype) +
                                           "; loss cross_entropy needs integer class indices (torch.int64)");
    }
    if (loss_ != "cross_entropy" && !c10::isFloatingType(spec.dtype)) {
      throw options_.invalid("target", "names field '" + target_ + "', which is " + c10::toString(spec.dtype) +
                                           "; loss " + loss_ + " needs a floating-point target (save it with .float())");
    }
  }

  // forward on the input fields. The first call's failure is the user's
  // model or data not fitting each other (exit 2, with TorchScript's text);
  // a later one is a run-time failure.
  torch::Tensor forward(const Batch& batch) {
    std::vector<c10::IValue> args;
    args.reserve(inputs_.size());
    for (const auto& name : inputs_) args.emplace_back(batch.fields.at(name).to(device_));
    c10::IValue result;
    try {
      torch::jit::GraphOptimizerEnabledGuard optimize(jit_optimize_);
      result = module_.forward(args);
    } catch (const std::exception& e) {
      const std::string text = "the module's forward failed on " + std::string(called_ ? "a" : "the first") +
                               " batch (inputs: " + join(inputs_) + "): " + excerpt(error_text(e), 4000);
      if (called_) throw Error::runtime(text);
      throw Error::usage(text);
    }
    called_ = true;
    if (!result.isTensor()) {
      throw Error::usage("the module's forward returned a " + result.tagKind() + "; it must return a tensor (" +
                         (loss_ == "module" ? "the mean loss" : "the output compared with the target") + ")");
    }
    torch::Tensor out = result.toTensor();
    if (loss_ == "module" && (out.numel() != 1 || !out.is_floating_point())) {
      throw Error::usage("task.loss = \"module\" needs forward to return the mean loss as a floating-point scalar; "
                         "it returned " + std::string(c10::toString(out.scalar_type())) + " " + c10::str(out.sizes()));
    }
    return loss_ == "module" ? out.reshape({}) : out;
  }

  Options options_;
  torch::jit::Module module_;
  std::string loss_, target_;
  std::vector<std::string> inputs_;
  int64_t eval_batch_ = 512;
  bool jit_optimize_ = false;
  torch::Device device_{torch::kCPU};  // where the module is (to())
  std::unique_ptr<Dataset> train_, validation_;
  std::vector<NamedTensor> params_, frozen_, buffers_;
  bool called_ = false;
};

}  // namespace

std::vector<TaskOptionInfo> torchscript_options() {
  return {
      {"module", "string", "", "TorchScript file of the model: torch.jit.script(model).save(path) (required)"},
      {"train", "string", "",
       "training data: a torch.save'd dict of tensors ({\"x\": ..., \"y\": ...}, one row per sample), or a folder of "
       "such shard files (*.pt, streamed two at a time) (required)"},
      {"validation", "string", "", "validation data, in the same form (optional)"},
      {"inputs", "list", "x", "fields passed to forward, in this order"},
      {"loss", "string", "cross_entropy",
       "cross_entropy (classes in the output's last dimension), mse, bce_with_logits, or module (forward returns the "
       "mean loss)"},
      {"target", "string", "y", "field compared with forward's output (not with loss = \"module\")"},
      {"eval_batch_size", "int", "512", "samples per forward during validation"},
      {"jit_optimize", "bool", "false",
       "let TorchScript's graph executor optimise forward and backward (off: ops run as in eager PyTorch, which "
       "measured faster for small models on CPU, see bench/own_model.sh)"},
  };
}

std::unique_ptr<Task> make_torchscript(const Options& options, uint64_t seed) {
  return std::make_unique<TorchScriptTask>(options, seed);
}

}  // namespace loom::train::tasks
