// SPDX-License-Identifier: Apache-2.0
// The training state's raw format (core/src/train/state_format.cpp): a
// snapshot restores every parameter, buffer, optimizer statistic and step
// counter bit for bit; the same state gives the same bytes; bytes that do
// not fit are refused with a usage error naming why, and leave the state as
// it was; a LibTorch archive of earlier versions (loom-state-1) still loads.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

#include "loom/status.hpp"
#include "state.hpp"

namespace loom::train {
namespace {

// Two parameters and a buffer; nothing here runs a forward pass.
class Tiny : public Task {
 public:
  explicit Tiny(uint64_t seed, int64_t rows = 3) {
    torch::manual_seed(seed);
    w_ = torch::randn({rows, 5}).requires_grad_();
    b_ = torch::randn({5}).requires_grad_();
    rm_ = torch::zeros({5});
  }
  std::string name() const override { return "tiny"; }
  std::vector<NamedTensor> parameters() override { return {{"w", w_}, {"b", b_}}; }
  std::vector<NamedTensor> buffers() override { return {{"rm", rm_}}; }
  void set_training(bool) override {}
  const Dataset& train_data() const override { throw std::logic_error("not used"); }
  const Dataset* validation_data() const override { return nullptr; }
  torch::Tensor loss(const Batch&) override { throw std::logic_error("not used"); }
  Metrics evaluate(const Dataset&) override { return {}; }
  std::string headline_metric() const override { return "loss"; }

 private:
  torch::Tensor w_, b_, rm_;
};

TrainerSettings settings(const std::string& optimizer) {
  TrainerSettings s;
  s.task = "tiny";
  s.optimizer = optimizer;
  s.momentum = optimizer == "sgd" ? 0.9 : 0.0;
  return s;
}

// n optimizer steps on random gradients, the buffer moving too.
void train(TrainingState& st, Task& task, int n, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard guard;
  for (int i = 0; i < n; ++i) {
    for (const auto& p : st.params()) p.grad().copy_(torch::randn_like(p));
    st.optimizer().step();
    st.step += 1;
    task.buffers()[0].second.add_(0.5);
  }
}

// Everything a snapshot carries, as one list of tensors (cloned), and the step.
struct Contents {
  std::vector<torch::Tensor> tensors;
  int64_t step = 0;
};
Contents contents(TrainingState& st, Task& task) {
  Contents c;
  for (const auto& p : st.params()) c.tensors.push_back(p.detach().clone());
  for (const auto& [name, b] : task.buffers()) c.tensors.push_back(b.clone());
  st.optimizer_views();
  for (const auto& t : st.optimizer_tensors()) c.tensors.push_back(t.clone());
  for (auto& [key, ps] : st.optimizer().state()) {
    if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(ps.get()))
      c.tensors.push_back(torch::tensor(a->step()));
    if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(ps.get()))
      c.tensors.push_back(torch::tensor(a->step()));
  }
  c.step = st.step;
  return c;
}
void expect_same(const Contents& a, const Contents& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) EXPECT_TRUE(torch::equal(a.tensors[i], b.tensors[i])) << "tensor " << i;
  EXPECT_EQ(a.step, b.step);
}

class StateFormat : public ::testing::TestWithParam<std::string> {};

TEST_P(StateFormat, ARoundTripRestoresEveryTensorBitForBit) {
  Tiny task(1);
  TrainingState st(task, settings(GetParam()));
  train(st, task, 3, 10);
  const Contents saved = contents(st, task);
  const std::string bytes = st.snapshot();
  ASSERT_EQ(bytes.substr(0, 8), "LOOMST02");
  train(st, task, 2, 11);  // moves everything on
  st.restore(bytes);
  expect_same(contents(st, task), saved);
  // And into another process's state: a joiner's, which has never stepped.
  Tiny other_task(2);
  TrainingState other(other_task, settings(GetParam()));
  other.restore(bytes);
  expect_same(contents(other, other_task), saved);
  // Training on from there goes exactly as the original does.
  train(st, task, 2, 12);
  train(other, other_task, 2, 12);
  expect_same(contents(other, other_task), contents(st, task));
}

// A joiner's optimizer statistics (it has never stepped) are made by the
// restore as views of one block in huge pages when they come to 4 MiB or
// more: they hold the snapshot's values, and training on goes exactly as
// the original does.
TEST_P(StateFormat, AJoinersStatisticsShareOneBlockAndTrainOnExactly) {
  constexpr int64_t kRows = 300000;  // 1.5 M parameters: 6 MiB per statistic
  Tiny task(1, kRows);
  TrainingState st(task, settings(GetParam()));
  train(st, task, 2, 20);
  const std::string bytes = st.snapshot();
  Tiny other_task(2, kRows);
  TrainingState other(other_task, settings(GetParam()));
  other.restore(bytes);
  expect_same(contents(other, other_task), contents(st, task));
  other.optimizer_views();
  const auto stats = other.optimizer_tensors();
  ASSERT_FALSE(stats.empty());
  for (const auto& t : stats)
    EXPECT_EQ(t.storage().data(), stats.front().storage().data()) << "a statistic outside the block";
  train(st, task, 2, 21);
  train(other, other_task, 2, 21);
  expect_same(contents(other, other_task), contents(st, task));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, StateFormat, ::testing::Values("adam", "adamw", "sgd"),
                         [](const auto& info) { return info.param; });

TEST(StateFormatBytes, TheSameStateGivesTheSameBytesInTheSameBuffer) {
  Tiny a_task(1), b_task(1);
  TrainingState a(a_task, settings("adam")), b(b_task, settings("adam"));
  train(a, a_task, 2, 5);
  train(b, b_task, 2, 5);
  std::string x, y;
  a.snapshot_into(x);
  b.snapshot_into(y);
  EXPECT_EQ(x, y) << "peers holding the same state must send the same bytes";
  const char* where = x.data();
  train(a, a_task, 1, 6);
  a.snapshot_into(x);
  EXPECT_EQ(x.data(), where) << "a snapshot of the same size reuses its buffer";
  EXPECT_NE(x, y);
}

TEST(StateFormatBytes, AStateFromBeforeTheFirstStepLeavesNoOptimizerState) {
  Tiny task(1);
  TrainingState st(task, settings("adam"));
  const std::string fresh = st.snapshot();
  train(st, task, 2, 3);
  ASSERT_FALSE(st.optimizer().state().empty());
  st.restore(fresh);
  EXPECT_TRUE(st.optimizer().state().empty());
  EXPECT_EQ(st.step, 0);
  train(st, task, 1, 4);  // and it steps from there
  EXPECT_EQ(st.optimizer().state().size(), 2u);
}

// Each defect gets a usage error naming it, and the state stays as it was.
TEST(StateFormatBytes, BadBytesAreRefusedWithTheReasonAndChangeNothing) {
  Tiny task(1);
  TrainingState st(task, settings("adam"));
  train(st, task, 2, 7);
  const std::string good = st.snapshot();
  const Contents before = contents(st, task);
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);  // same length: the layout stays
    return s;
  };
  struct Case {
    std::string name, bytes, says;
  };
  std::vector<Case> cases = {
      {"empty", "", "not a Loom training state"},
      {"magic only", good.substr(0, 8), "not a Loom training state"},
      {"cut in its header", good.substr(0, 40), "header"},
      {"cut in its data", good.substr(0, good.size() - 7), "beyond the state's end"},
      {"another task", edited("task tiny", "task tinx"), "task 'tinx'"},
      {"another optimizer", edited("optimizer adam", "optimizer sgd "), "optimizer is sgd"},
      {"another shape", edited("Float 3,5", "Float 5,3"), "[5,3] in the state"},
      {"another dtype", edited("p0 Float", "p0 Doubl"), "Doubl"},
      {"an unknown item", edited("step ", "stap "), "unknown item 'stap'"},
      {"no end", edited("end\n", "enx\n"), "unknown item 'enx'"},
      {"a buffer missing", edited("tensor b0", "tensor q0"), "no buffer rm (tensor b0)"},
      {"a tensor the model lacks", edited("tensor o0.0", "tensor x0.0"), "lacks (x0.0)"},
      {"an unaligned offset", edited(" 64 ", " 65 "), "multiple of 64"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    try {
      st.restore(c.bytes);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), Error::kUsage);
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
    expect_same(contents(st, task), before);
  }
}

// What snapshots were before the raw format: checkpoints of earlier runs.
TEST(StateFormatBytes, AnArchiveOfEarlierVersionsStillRestores) {
  Tiny task(1);
  TrainingState st(task, settings("adamw"));
  train(st, task, 3, 8);
  const Contents saved = contents(st, task);
  torch::serialize::OutputArchive archive;
  archive.write("format", c10::IValue(std::string("loom-state-1")));
  archive.write("task", c10::IValue(std::string("tiny")));
  archive.write("step", c10::IValue(st.step));
  archive.write("count", c10::IValue(int64_t(st.params().size())));
  for (size_t i = 0; i < st.params().size(); ++i) archive.write("p" + std::to_string(i), st.params()[i].detach());
  archive.write("buffers", c10::IValue(int64_t(1)));
  archive.write("b0", task.buffers()[0].second);
  torch::serialize::OutputArchive opt;
  st.optimizer().save(opt);
  archive.write("optimizer", opt);
  std::string old;
  archive.save_to([&old](const void* data, size_t n) {
    old.append(static_cast<const char*>(data), n);
    return n;
  });
  Tiny other_task(3);
  TrainingState other(other_task, settings("adamw"));
  other.restore(old);
  expect_same(contents(other, other_task), saved);
}

}  // namespace
}  // namespace loom::train
