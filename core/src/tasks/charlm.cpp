// SPDX-License-Identifier: Apache-2.0
// tasks/charlm.cpp: the `charlm` task. A small causal transformer models a
// text file byte by byte (vocabulary 256, so any UTF-8 file works); it reports
// the cross-entropy and bits per character (loss / ln 2, per byte).
//
// Data: sample i is bytes [i, i + context) as input and [i + 1, i + context + 1)
// as target (int64). The first part of the file trains, the last val_fraction
// (at least context + 1 bytes) validates; evaluate() reads at most 64 windows
// spread evenly over a data set, to stay fast.
// Model (GPT-2 style, pre-norm): token and learned position embeddings
// (N(0, 0.02)), `layers` blocks of x + attn(LN(x)), x + MLP(LN(x)) with causal
// multi-head self-attention and a GELU MLP, a final LayerNorm and a Linear head;
// Linear layers keep LibTorch's default init. Built after torch::manual_seed(seed).
// d_model 64, layers 1, ffn 256 is ~87 k parameters; the defaults ~471 k;
// d_model 512, layers 6, ffn 2048 ~19.2 M.
#include <cmath>
#include <fstream>
#include <iterator>

#include "builtin.hpp"
#include "memory_estimate.hpp"

namespace loom::train::tasks {
namespace {

constexpr int64_t kVocab = 256;
constexpr int64_t kEvalWindows = 64;

class WindowDataset : public Dataset {
 public:
  WindowDataset(torch::Tensor bytes, int64_t context) : bytes_(std::move(bytes)), context_(context) {}
  int64_t size() const override { return bytes_.size(0) - context_; }
  Batch get(const std::vector<int64_t>& indices) const override {
    auto start = index_tensor(indices, size(), "charlm");
    auto windows = bytes_.index({start.unsqueeze(1) + torch::arange(context_ + 1)}).to(torch::kLong);
    using torch::indexing::Slice;
    Batch batch;
    batch.input = windows.index({Slice(), Slice(0, context_)});
    batch.target = windows.index({Slice(), Slice(1, torch::indexing::None)});
    batch.size = static_cast<int64_t>(indices.size());
    return batch;
  }

 private:
  torch::Tensor bytes_;  // uint8 [n]
  int64_t context_;
};

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t d_model, int64_t heads, int64_t ffn)
      : heads(heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})))),
        qkv(register_module("qkv", torch::nn::Linear(d_model, 3 * d_model))),
        proj(register_module("proj", torch::nn::Linear(d_model, d_model))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})))),
        fc1(register_module("fc1", torch::nn::Linear(d_model, ffn))),
        fc2(register_module("fc2", torch::nn::Linear(ffn, d_model))) {}

  torch::Tensor forward(torch::Tensor x, const torch::Tensor& causal_mask) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), dh = d / heads;
    auto q_k_v = qkv(ln1(x)).view({b, t, 3, heads, dh}).permute({2, 0, 3, 1, 4});  // [3, b, h, t, dh]
    auto scores = torch::matmul(q_k_v[0], q_k_v[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(dh));
    auto attn = torch::softmax(scores.masked_fill(causal_mask, -INFINITY), -1);
    auto heads_out = torch::matmul(attn, q_k_v[2]).transpose(1, 2).reshape({b, t, d});
    x = x + proj(heads_out);
    return x + fc2(torch::gelu(fc1(ln2(x))));
  }

  int64_t heads;
  torch::nn::LayerNorm ln1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Block);

struct CharLMImpl : torch::nn::Module {
  CharLMImpl(int64_t context, int64_t d_model, int64_t layers, int64_t heads, int64_t ffn)
      : tok(register_module("tok", torch::nn::Embedding(kVocab, d_model))),
        pos(register_module("pos", torch::nn::Embedding(context, d_model))),
        blocks(register_module("blocks", torch::nn::ModuleList())) {
    for (int64_t i = 0; i < layers; ++i) blocks->push_back(Block(d_model, heads, ffn));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})));
    head = register_module("head", torch::nn::Linear(d_model, kVocab));
    torch::NoGradGuard no_grad;
    tok->weight.normal_(0.0, 0.02);
    pos->weight.normal_(0.0, 0.02);
  }

  // tokens [b, t] int64 -> logits [b, t, 256].
  torch::Tensor forward(const torch::Tensor& tokens) {
    const int64_t t = tokens.size(1);
    auto device = tokens.device();
    auto causal_mask = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(device)).triu(1);
    auto x = tok(tokens) + pos(torch::arange(t, torch::TensorOptions().dtype(torch::kLong).device(device)));
    for (auto& block : *blocks) x = block->as<BlockImpl>()->forward(x, causal_mask);
    return head(ln_f(x));
  }

  torch::nn::Embedding tok, pos;
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(CharLM);

class CharLMTask : public ModuleTask {
 public:
  CharLMTask(const Options& options, uint64_t seed) {
    check_memory(options, estimate_charlm(options));  // before allocating anything
    if (!options.is_set("path")) {
      throw options.invalid("path", "is required: set [task] path to a UTF-8 text file");
    }
    std::string path = options.get_string("path");
    int64_t context = options.get_int("context", 1);
    int64_t d_model = options.get_int("d_model", 1);
    int64_t layers = options.get_int("layers", 1);
    int64_t heads = options.get_int("heads", 1);
    int64_t ffn = options.get_int("ffn", 1);
    double val_fraction = options.get_float("val_fraction", 0.0, 1.0, true);
    if (d_model % heads != 0) {
      throw options.invalid("heads", "must divide d_model (" + std::to_string(d_model) + "), got " +
                                         std::to_string(heads));
    }

    std::ifstream file(path, std::ios::binary);
    if (!file) throw options.invalid("path", "names '" + path + "', which does not exist or cannot be read");
    std::vector<uint8_t> text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    auto n = static_cast<int64_t>(text.size());
    // One window needs context + 1 bytes; the validation part holds at least one.
    int64_t val_bytes = val_fraction > 0 ? std::max(std::llround(val_fraction * n), static_cast<long long>(context + 1)) : 0;
    int64_t needed = (context + 1) + (val_fraction > 0 ? context + 1 : 0);
    if (n < needed) {
      throw options.invalid("path", "names '" + path + "', which holds " + std::to_string(n) + " bytes; context " +
                                        std::to_string(context) + (val_fraction > 0 ? " with validation" : "") +
                                        " needs at least " + std::to_string(needed) + " (use a longer text or a "
                                        "smaller context)");
    }
    auto bytes = torch::from_blob(text.data(), {n}, torch::kUInt8).clone();
    train_ = std::make_unique<WindowDataset>(bytes.slice(0, 0, n - val_bytes), context);
    if (val_bytes > 0) validation_ = std::make_unique<WindowDataset>(bytes.slice(0, n - val_bytes, n), context);

    torch::manual_seed(seed);
    model_ = CharLM(context, d_model, layers, heads, ffn);
  }

  std::string name() const override { return "charlm"; }
  
  const Dataset& train_data() const override { return *train_; }
  const Dataset* validation_data() const override { return validation_.get(); }
  std::string headline_metric() const override { return "bpc"; }

  torch::Tensor loss(const Batch& batch) override {
    auto device = device_of(*model_);
    auto logits = model_->forward(batch.input.to(device));
    return torch::cross_entropy_loss(logits.reshape({-1, kVocab}), batch.target.to(device).reshape({-1}));
  }

  Metrics evaluate(const Dataset& data) override {
    torch::NoGradGuard no_grad;
    const int64_t n = data.size(), count = std::min(n, kEvalWindows);
    if (count == 0) return {{"loss", 0.0}, {"bpc", 0.0}};
    std::vector<int64_t> indices;
    for (int64_t k = 0; k < count; ++k) indices.push_back(count == 1 ? 0 : k * (n - 1) / (count - 1));
    double loss_value = loss(data.get(indices)).item<double>();
    return {{"loss", loss_value}, {"bpc", loss_value / std::log(2.0)}};
  }

 protected:
  torch::nn::Module& module() override { return *model_; }

 private:
  CharLM model_{nullptr};
  std::unique_ptr<WindowDataset> train_, validation_;
};

}  // namespace

std::unique_ptr<Task> make_charlm(const Options& options, uint64_t seed) {
  return std::make_unique<CharLMTask>(options, seed);
}

}  // namespace loom::train::tasks
