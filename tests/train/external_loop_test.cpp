// SPDX-License-Identifier: Apache-2.0
// loom::train::ExternalLoop (loom/train/external_loop.hpp): a loop that is
// not Loom's trains through a strategy. With the built-in `single` strategy:
// the gradients land in the buffers Loom attached, the optimizer statistics
// are the tensors it handed out, and bad input is a usage error naming what
// is wrong. (The swarm with Python and loom train peers: tests/python/.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "loom/status.hpp"
#include "loom/train/external_loop.hpp"

namespace loom::train {
namespace {

ExternalLoopSpec spec_for(std::vector<NamedTensor> params, std::string optimizer = "adamw") {
  ExternalLoopSpec s;
  s.strategy = "single";
  s.params = std::move(params);
  s.optimizer = std::move(optimizer);
  s.batch_size = 16;
  return s;
}

TEST(ExternalLoop, ALoopsOwnModelTrainsThroughTheSingleStrategy) {
  torch::manual_seed(0);
  auto w = torch::zeros({4, 1}, torch::requires_grad());
  ExternalLoop loop(spec_for({{"w", w}}));
  auto stats = loop.optimizer_statistics();
  ASSERT_EQ(stats.size(), 1u);
  ASSERT_EQ(stats[0].size(), 2u);  // exp_avg, exp_avg_sq
  EXPECT_EQ(stats[0][0].sizes(), w.sizes());
  EXPECT_EQ(stats[0][0].abs().sum().item<double>(), 0.0);
  const void* grad = w.grad().data_ptr();  // attached by Loom
  ASSERT_NE(grad, nullptr);
  // A hand-written Adam over Loom's statistics, as Python's torch.optim does.
  auto x = torch::randn({64, 4});
  auto y = x.matmul(torch::tensor({1.0f, -2.0f, 0.5f, 3.0f}).view({4, 1}));
  loop.setup();
  double first = 0, last = 0;
  for (int step = 1; step <= 200; ++step) {
    auto loss = torch::mse_loss(x.matmul(w), y);
    loss.backward();
    if (step == 1) first = loss.item<double>();
    last = loss.item<double>();
    ASSERT_TRUE(loop.after_backward(16));  // single: every step
    {
      torch::NoGradGuard no_grad;
      stats[0][0].mul_(0.9).add_(w.grad(), 0.1);
      stats[0][1].mul_(0.999).addcmul_(w.grad(), w.grad(), 0.001);
      auto m = stats[0][0] / (1 - std::pow(0.9, step));
      auto v = stats[0][1] / (1 - std::pow(0.999, step));
      w.sub_(0.05 * m / (v.sqrt() + 1e-8));
    }
    loop.after_optimizer_step();
    loop.zero_grads();
    EXPECT_EQ(w.grad().data_ptr(), grad) << "the gradient buffer moved";
  }
  EXPECT_EQ(loop.global_step(), 200);
  EXPECT_LT(last, first / 100) << "first loss " << first << ", last " << last;
  EXPECT_NE(loop.description().find("parameter 'w': Float [4, 1]"), std::string::npos) << loop.description();
  EXPECT_NE(loop.description().find("optimizer: adamw"), std::string::npos) << loop.description();
  loop.teardown();
  loop.teardown();  // idempotent
}

TEST(ExternalLoop, SgdWithMomentumHasOneStatisticAndWithoutNone) {
  auto a = torch::zeros({3}, torch::requires_grad());
  auto spec = spec_for({{"a", a}}, "sgd");
  spec.momentum = 0.9;
  EXPECT_EQ(ExternalLoop(spec).optimizer_statistics().at(0).size(), 1u);
  auto b = torch::zeros({3}, torch::requires_grad());
  EXPECT_TRUE(ExternalLoop(spec_for({{"b", b}}, "sgd")).optimizer_statistics().at(0).empty());
}

TEST(ExternalLoop, AnotherOptimizerIsNamedInTheDescriptionAndLendsNoStatistics) {
  auto w = torch::zeros({2, 2}, torch::requires_grad());
  auto spec = spec_for({{"w", w}}, "sgd");
  spec.other_optimizer = "torch.optim.rmsprop.RMSprop";
  ExternalLoop loop(spec);
  EXPECT_TRUE(loop.optimizer_statistics().at(0).empty());
  EXPECT_NE(loop.description().find("optimizer: torch.optim.rmsprop.RMSprop (state per parameter: its own, not shared)\n"),
            std::string::npos)
      << loop.description();
  EXPECT_EQ(loop.description().find("optimizer: sgd"), std::string::npos) << loop.description();
  spec.momentum = 0.9;  // would lend a momentum buffer the other optimizer does not use
  EXPECT_THROW(ExternalLoop{spec}, Error);
}

struct BadCase {
  const char* name;
  std::function<ExternalLoopSpec()> make;
  const char* said;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class ExternalLoopBadInput : public testing::TestWithParam<BadCase> {};

TEST_P(ExternalLoopBadInput, IsAUsageErrorNamingWhatIsWrong) {
  try {
    ExternalLoop loop(GetParam().make());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), Error::kUsage) << e.what();
    EXPECT_NE(std::string(e.what()).find(GetParam().said), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ExternalLoopBadInput,
    testing::Values(
        BadCase{"NoParameters", [] { return spec_for({}); }, "no parameters"},
        BadCase{"IntegerParameter", [] { return spec_for({{"n", torch::zeros({2}, torch::kLong)}}); },
                "valid dtypes"},
        BadCase{"MetaDevice", [] { return spec_for({{"m", torch::zeros({2}, torch::Device(torch::kMeta))}}); },
                "valid device: cpu"},
        BadCase{"NotContiguous", [] { return spec_for({{"t", torch::zeros({4, 4}).t()}}); }, "not contiguous"},
        BadCase{"ZeroBatch",
                [] {
                  auto s = spec_for({{"w", torch::zeros({2})}});
                  s.batch_size = 0;
                  return s;
                },
                "at least 1"},
        BadCase{"UnknownOptimizer", [] { return spec_for({{"w", torch::zeros({2})}}, "lion"); }, "sgd, adam, adamw"},
        BadCase{"UnknownStrategy",
                [] {
                  auto s = spec_for({{"w", torch::zeros({2})}});
                  s.strategy = "nosuch";
                  return s;
                },
                "nosuch"}),
    [](const testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace loom::train
