// SPDX-License-Identifier: Apache-2.0
// The raw training-state format, loom-state-2: what snapshots and
// checkpoints hold. A state is sent to every joining peer and written at
// every checkpoint, so writing and reading it must cost one copy of each
// tensor, nothing more: LibTorch's archive (loom-state-1) took 1.5 s to
// write and over 2 s to read for a 130 MB charlm state on a busy machine.
//
//   magic "LOOMST02" (8 B), header length H (u64, little-endian),
//   the header (H bytes of text, one item per line):
//     loom-state-2
//     task NAME
//     step N                       the global step
//     optimizer adam|adamw|sgd|other
//     tensor NAME DTYPE SHAPE OFFSET BYTES
//     ostep I COUNT                Adam's step counter of parameter I
//     end
//   then the data, from the first multiple of 64 at or after 16 + H;
//   each tensor's bytes at OFFSET within it (a multiple of 64), C order,
//   little-endian, zeros in between.
// Tensor names: pI (parameter I), bI (buffer I), oI.K (statistic K of
// parameter I's optimizer state, in optimizer_stats.hpp's order). SHAPE is
// "d0,d1,..." ("-" for a scalar), DTYPE LibTorch's name (Float, Half...).
// The same state gives the same bytes in every process, so peers can
// compare and share them.
#include <cstring>
#include <functional>
#include <map>
#include <sstream>

#include "huge_pages.h"
#include "loom/status.hpp"
#include "optimizer_stats.hpp"
#include "state.hpp"
#include "state_format.hpp"

namespace loom::train {
using namespace detail;

namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'S', 'T', '0', '2'};
constexpr size_t kAlign = 64;
constexpr size_t kPrefix = 16;  // magic and header length
constexpr uint64_t kMaxHeader = uint64_t(64) << 20;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string shape_text(const torch::Tensor& t) {
  if (t.dim() == 0) return "-";
  std::string s;
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? "," : "") + std::to_string(t.size(d));
  return s;
}

const char* optimizer_kind(torch::optim::Optimizer* o) {
  if (dynamic_cast<torch::optim::AdamW*>(o)) return "adamw";
  if (dynamic_cast<torch::optim::Adam*>(o)) return "adam";
  if (dynamic_cast<torch::optim::SGD*>(o)) return "sgd";
  return "other";
}

struct Entry {
  std::string dtype, shape;
  uint64_t offset = 0, bytes = 0;
  bool used = false;
};

// The header, parsed and checked for form (not yet against the model).
struct Header {
  std::string task, optimizer;
  int64_t step = 0;
  std::map<std::string, Entry> tensors;
  std::map<size_t, int64_t> steps;  // parameter -> Adam's step counter
  size_t data_start = 0;
};

[[noreturn]] void malformed(const std::string& what) {
  throw Error::usage("not a valid Loom training state (loom-state-2): " + what);
}

Header parse(const char* data, size_t len) {
  uint64_t h = 0;
  for (int i = 7; i >= 0; --i) h = (h << 8) | uint8_t(data[8 + i]);
  if (h > kMaxHeader || h > len - kPrefix) malformed("its header claims " + std::to_string(h) + " bytes, the state has " + std::to_string(len));
  Header out;
  out.data_start = align_up(kPrefix + h);
  if (out.data_start > len) malformed("it ends before its data begins");
  std::istringstream in(std::string(data + kPrefix, h));
  std::string line;
  size_t n = 0;
  bool ended = false;
  while (std::getline(in, line)) {
    ++n;
    auto bad = [&](const std::string& why) { malformed("header line " + std::to_string(n) + " ('" + line.substr(0, 80) + "'): " + why); };
    if (n == 1) {
      if (line != "loom-state-2") bad("expected 'loom-state-2'");
      continue;
    }
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "task") {
      out.task = line.size() > 5 ? line.substr(5) : "";
    } else if (key == "step") {
      if (!(words >> out.step)) bad("no step number");
    } else if (key == "optimizer") {
      if (!(words >> out.optimizer)) bad("no optimizer name");
    } else if (key == "tensor") {
      std::string name;
      Entry e;
      if (!(words >> name >> e.dtype >> e.shape >> e.offset >> e.bytes)) bad("expected NAME DTYPE SHAPE OFFSET BYTES");
      if (e.offset % kAlign != 0) bad("an offset that is not a multiple of 64");
      if (e.offset > len - out.data_start || e.bytes > len - out.data_start - e.offset)
        bad("its bytes lie beyond the state's end (" + std::to_string(len) + " bytes)");
      if (!out.tensors.emplace(name, e).second) bad("tensor " + name + " twice");
    } else if (key == "ostep") {
      size_t i = 0;
      int64_t count = 0;
      if (!(words >> i >> count) || count < 0) bad("expected PARAMETER COUNT");
      out.steps[i] = count;
    } else if (key == "end") {
      ended = true;
      break;
    } else {
      bad("unknown item '" + key + "'");
    }
  }
  if (!ended) malformed("its header has no 'end' line (truncated?)");
  return out;
}

// Fresh optimizer statistics handed out as views of one block in huge pages
// (uninitialised: the restore writes every element it hands out); a tensor
// the block cannot hold is made by zeros_like instead.
struct StatisticsBlock {
  torch::Tensor flat;
  int64_t used = 0;
  std::function<torch::Tensor(const torch::Tensor&)> make() {
    if (!flat.defined()) return nullptr;
    return [this](const torch::Tensor& like) { return take(like); };
  }
  torch::Tensor take(const torch::Tensor& like) {
    const int64_t n = like.numel(), padded = (n + 15) / 16 * 16;  // 64-byte aligned views
    if (!flat.defined() || like.scalar_type() != flat.scalar_type() || !like.is_cpu() || used + padded > flat.numel())
      return torch::zeros_like(like, torch::MemoryFormat::Contiguous);
    torch::Tensor v = flat.narrow(0, used, n).view(like.sizes());
    used += padded;
    return v;
  }
};

// Room for `kinds` statistics of every parameter that has no optimizer
// state yet and gets some from the snapshot; none below 4 MiB, or when the
// parameters are not all on the CPU in one dtype.
template <class State>
StatisticsBlock statistics_block(const std::vector<torch::Tensor>& params, State& state,
                                 const std::map<size_t, std::map<size_t, const char*>>& o_src,
                                 const std::map<size_t, int64_t>& steps, size_t kinds) {
  StatisticsBlock b;
  int64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!o_src.count(i) && !steps.count(i)) continue;
    if (find_param_state(state, params[i]) != state.end()) continue;
    if (!params[i].is_cpu() || params[i].scalar_type() != params.front().scalar_type()) return b;
    total += int64_t(kinds) * ((params[i].numel() + 15) / 16 * 16);
  }
  const size_t bytes = size_t(total) * params.front().element_size();
  if (bytes < (size_t(4) << 20)) return b;
  void* p = loom_plugin_common::allocate_huge(bytes);
  b.flat = torch::from_blob(p, {total}, [](void* q) { std::free(q); }, params.front().options());
  return b;
}

}  // namespace

bool is_raw_state(const char* data, size_t len) { return len >= kPrefix && std::memcmp(data, kMagic, sizeof kMagic) == 0; }

void TrainingState::snapshot_into(std::string& out) const {
  sync_step_counters();
  std::vector<std::pair<std::string, torch::Tensor>> items;
  for (size_t i = 0; i < params_.size(); ++i) items.emplace_back("p" + std::to_string(i), params_[i].detach());
  for (size_t i = 0; i < buffers_.size(); ++i) items.emplace_back("b" + std::to_string(i), buffers_[i].second.detach());
  std::string steps;
  auto& state = optimizer_->state();
  for (size_t i = 0; i < params_.size(); ++i) {
    auto it = find_param_state(state, params_[i]);
    if (it == state.end()) continue;  // no step yet
    const auto stats = statistics(it->second.get());
    for (size_t k = 0; k < stats.size(); ++k)
      if (stats[k]->defined()) items.emplace_back("o" + std::to_string(i) + "." + std::to_string(k), stats[k]->detach());
    with_step(it->second.get(), [&](auto& st) { steps += "ostep " + std::to_string(i) + " " + std::to_string(st.step()) + "\n"; });
  }
  std::string header = "loom-state-2\ntask " + task_.name() + "\nstep " +
                       std::to_string(step_source_ ? step_source_() : step) + "\noptimizer " +
                       optimizer_kind(optimizer_.get()) + "\n";
  std::vector<size_t> offsets;
  size_t data = 0;  // the data's length: it ends with the last tensor's last byte
  for (const auto& [name, t] : items) {
    offsets.push_back(align_up(data));
    const size_t bytes = size_t(t.numel()) * t.element_size();
    header += "tensor " + name + " " + c10::toString(t.scalar_type()) + " " + shape_text(t) + " " +
              std::to_string(offsets.back()) + " " + std::to_string(bytes) + "\n";
    data = offsets.back() + bytes;
  }
  header += steps + "end\n";
  const size_t start = align_up(kPrefix + header.size());
  // Same size as the last one (the usual case): no allocation and no
  // zero-filling pass; the padding is rewritten below either way.
  loom_plugin_common::reserve_huge(out, start + data);
  out.resize(start + data);
  char* base = out.data();
  std::memcpy(base, kMagic, sizeof kMagic);
  for (int i = 0; i < 8; ++i) base[8 + i] = char(uint8_t(uint64_t(header.size()) >> (8 * i)));
  std::memcpy(base + kPrefix, header.data(), header.size());
  std::memset(base + kPrefix + header.size(), 0, start - kPrefix - header.size());
  torch::NoGradGuard guard;
  for (size_t j = 0; j < items.size(); ++j) {
    const torch::Tensor& t = items[j].second;
    char* at = base + start + offsets[j];
    const size_t bytes = size_t(t.numel()) * t.element_size();
    if (t.is_cpu() && t.is_contiguous()) {
      if (bytes) std::memcpy(at, t.data_ptr(), bytes);
    } else {
      torch::from_blob(at, t.sizes(), t.options().device(torch::kCPU)).copy_(t);
    }
    const size_t end = j + 1 < items.size() ? offsets[j + 1] : data;
    std::memset(at + bytes, 0, end - offsets[j] - bytes);
  }
}

void TrainingState::restore_raw(const char* data, size_t len) {
  Header h = parse(data, len);
  if (h.task != task_.name()) throw Error::usage("the state is of task '" + h.task + "', this run trains '" + task_.name() + "'");
  const std::string mine_kind = optimizer_kind(optimizer_.get());
  if (h.optimizer != mine_kind)
    throw Error::usage("the state's optimizer is " + h.optimizer + ", this run's " + mine_kind);
  // Everything is checked before anything is written: a state that does
  // not fit leaves this one as it was.
  auto take = [&](const std::string& name, const torch::Tensor& like, const std::string& what) -> const char* {
    auto it = h.tensors.find(name);
    if (it == h.tensors.end()) throw Error::usage("the state has no " + what + " (tensor " + name + ")");
    Entry& e = it->second;
    const std::string dtype = c10::toString(like.scalar_type());
    const size_t bytes = size_t(like.numel()) * like.element_size();
    if (e.dtype != dtype || e.shape != shape_text(like) || e.bytes != bytes)
      throw Error::usage(what + " is " + e.dtype + " [" + e.shape + "] in the state, " + dtype + " [" +
                         shape_text(like) + "] in this model");
    e.used = true;
    return data + h.data_start + e.offset;
  };
  std::vector<const char*> p_src, b_src;
  for (size_t i = 0; i < params_.size(); ++i) p_src.push_back(take("p" + std::to_string(i), params_[i], "parameter " + names_[i]));
  for (size_t i = 0; i < buffers_.size(); ++i)
    b_src.push_back(take("b" + std::to_string(i), buffers_[i].second, "buffer " + buffers_[i].first));
  // Optimizer statistics: oI.K, K below what this optimizer keeps per parameter.
  std::map<size_t, std::map<size_t, const char*>> o_src;
  const size_t kinds = mine_kind == "sgd" ? 1 : mine_kind == "other" ? 0 : 3;  // statistics() per parameter
  for (auto& [name, e] : h.tensors) {
    if (e.used) continue;
    size_t i = 0, k = 0;
    char dot = 0;
    std::istringstream in(name.substr(name.empty() ? 0 : 1));
    if (name.empty() || name[0] != 'o' || !(in >> i >> dot >> k) || dot != '.' || !in.eof() || i >= params_.size())
      throw Error::usage("the state has a tensor this model lacks (" + name + ")");
    if (k >= kinds) throw Error::usage("the state has optimizer statistic " + std::to_string(k) + " of parameter " + names_[i] + ", which a " + mine_kind + " optimizer does not keep");
    o_src[i][k] = take(name, params_[i], "optimizer statistic " + std::to_string(k) + " of parameter " + names_[i]);
  }
  for (const auto& [i, count] : h.steps)
    if (i >= params_.size()) throw Error::usage("the state has a step counter of parameter " + std::to_string(i) + ", this model " + std::to_string(params_.size()));

  torch::NoGradGuard guard;
  auto put = [](torch::Tensor& dst, const char* src) {
    const size_t bytes = size_t(dst.numel()) * dst.element_size();
    if (dst.is_cpu() && dst.is_contiguous()) {
      if (bytes) std::memcpy(dst.data_ptr(), src, bytes);
    } else {
      dst.copy_(torch::from_blob(const_cast<char*>(src), dst.sizes(), dst.options().device(torch::kCPU)));
    }
  };
  for (size_t i = 0; i < params_.size(); ++i) put(params_[i], p_src[i]);
  for (size_t i = 0; i < buffers_.size(); ++i) put(buffers_[i].second, b_src[i]);
  auto& state = optimizer_->state();
  // A process that has not stepped yet (a joiner) has no optimizer state:
  // its statistics are made here, as views of one block in huge pages,
  // filled below. Made one by one in 4 KiB pages, a charlm state's 87 MB
  // took most of a second's page faults on a busy machine.
  StatisticsBlock block;
  if (!shared_statistics_) block = statistics_block(params_, state, o_src, h.steps, kinds);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto src = o_src.find(i);
    const auto st = h.steps.find(i);
    if (src == o_src.end() && st == h.steps.end()) {
      // No state for it in the snapshot (saved before its first step).
      auto it = find_param_state(state, params_[i]);
      if (it == state.end()) continue;
      if (!shared_statistics_) {
        state.erase(it);
        continue;
      }
      // Another optimizer holds these tensors (python/): zero them instead.
      for (torch::Tensor* t : statistics(it->second.get()))
        if (t->defined()) t->zero_();
      with_step(it->second.get(), [](auto& s) { s.step(0); });
      if (i < step_counters_.size()) step_counters_[i].fill_(0.0);
      continue;
    }
    torch::optim::OptimizerParamState& ps = param_state(i, block.make());
    const auto stats = statistics(&ps);
    for (size_t k = 0; k < stats.size(); ++k) {
      const char* from = src == o_src.end() ? nullptr : (src->second.count(k) ? src->second.at(k) : nullptr);
      if (from == nullptr) {
        if (stats[k]->defined()) stats[k]->zero_();  // amsgrad's maximum, when the state had none
        continue;
      }
      if (!stats[k]->defined()) *stats[k] = block.take(params_[i]);
      put(*stats[k], from);
    }
    const int64_t count = st == h.steps.end() ? 0 : st->second;
    with_step(&ps, [&](auto& s) { s.step(count); });
    if (i < step_counters_.size()) step_counters_[i].fill_(double(count));
  }
  step = h.step;
}

}  // namespace loom::train
