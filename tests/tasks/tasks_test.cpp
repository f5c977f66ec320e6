// SPDX-License-Identifier: Apache-2.0
// Tests of the built-in tasks (digits, teacher, charlm) and their registry:
// defaults, batch shapes, learning, seeding, and the option errors users see.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <random>

#include "loom/status.hpp"
#include "loom/train/task.hpp"

namespace loom::train {
namespace {

const char* kDigitsPath = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

bool digits_installed() { return std::ifstream(kDigitsPath).good(); }

// A text with enough structure to learn in a few steps.
std::string write_text(const std::string& name, int lines) {
  std::string path = ::testing::TempDir() + "loom_tasks_" + std::to_string(getpid()) + "_" + name;
  std::ofstream out(path, std::ios::binary);
  const char* words[] = {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "ünïcödé"};
  for (int i = 0; i < lines; ++i) out << words[i % 10] << ' ' << words[(i * 3) % 10] << ' ' << i % 7 << ".\n";
  return path;
}

TaskOptions options(std::map<std::string, std::string> values) {
  TaskOptions result;
  for (const auto& [key, value] : values) {
    result.values[key] = value;
    result.sources[key] = "run.toml:" + std::to_string(10 + result.values.size());
  }
  return result;
}

TaskOptions small_charlm(const std::string& path) {
  return options({{"path", path}, {"context", "16"}, {"d_model", "32"}, {"layers", "1"}, {"heads", "2"},
                  {"ffn", "64"}});
}

std::vector<int64_t> sample(std::mt19937_64& rng, int64_t size, int64_t batch) {
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < batch; ++i) indices.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(size)));
  return indices;
}

// Adam on random batches; returns the loss of every step.
std::vector<torch::Tensor> tensors(const std::vector<NamedTensor>& named) {
  std::vector<torch::Tensor> out;
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}

std::vector<double> train(Task& task, int steps, int64_t batch, double lr) {
  torch::optim::Adam adam(tensors(task.parameters()), torch::optim::AdamOptions(lr));
  std::mt19937_64 rng(42);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    adam.zero_grad();
    auto loss = task.loss(task.train_data().get(sample(rng, task.train_data().size(), batch)));
    loss.backward();
    adam.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

double mean(const std::vector<double>& v, size_t from, size_t to) {
  double sum = 0;
  for (size_t i = from; i < to; ++i) sum += v[i];
  return sum / static_cast<double>(to - from);
}

int64_t parameter_count(Task& task) {
  int64_t n = 0;
  for (const auto& [name, p] : task.parameters()) n += p.numel();
  return n;
}

// Runs `make` and returns the Error it throws (failing when it throws none).
template <typename F>
Error error_of(F make) {
  try {
    make();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no loom::Error thrown";
  return Error::runtime("");
}

TEST(TaskRegistry, NamesAndOptions) {
  EXPECT_EQ(task_names(), (std::vector<std::string>{"charlm", "digits", "teacher", "torchscript"}));
  auto digits = task_options("digits");
  ASSERT_FALSE(digits.empty());
  EXPECT_EQ(digits[0].name, "path");
  EXPECT_EQ(digits[0].default_value, kDigitsPath);
  for (const auto& name : task_names()) {
    for (const auto& info : task_options(name)) {
      EXPECT_TRUE(info.type == "int" || info.type == "float" || info.type == "string" || info.type == "bool" ||
                  info.type == "list");
      EXPECT_FALSE(info.help.empty()) << name << "." << info.name;
    }
  }
}

TEST(TaskRegistry, UnknownTaskListsValidTasks) {
  auto e = error_of([] { make_task("mnist", {}, 0); });
  EXPECT_EQ(e.exit_code(), 2);
  EXPECT_STREQ(e.what(), "unknown task 'mnist'; valid tasks: charlm, digits, teacher, torchscript");
  EXPECT_EQ(error_of([] { task_options("mnist"); }).exit_code(), 2);
}

TEST(TaskRegistry, ARegisteredTaskIsMadeByNameWithItsCheckedOptions) {
  int64_t seen_width = 0;
  register_task("registry_probe", {{"width", "int", "3", "a width"}},
                [&seen_width](const TaskArgs& args, uint64_t) -> std::unique_ptr<Task> {
                  seen_width = args.get_int("width", 1, 10);
                  return nullptr;
                });
  auto names = task_names();
  EXPECT_EQ(names.back(), "registry_probe");
  TaskOptions opts;
  opts.values["width"] = "7";
  EXPECT_EQ(error_of([&] { make_task("registry_probe", opts, 0); }).exit_code(), 1);  // it made no task
  EXPECT_EQ(seen_width, 7);
  opts.values["width"] = "70";
  EXPECT_EQ(error_of([&] { make_task("registry_probe", opts, 0); }).exit_code(), 2);
  opts.values = {{"depth", "1"}};
  EXPECT_NE(std::string(error_of([&] { make_task("registry_probe", opts, 0); }).what()).find("valid options: width"),
            std::string::npos);
  EXPECT_EQ(error_of([] { register_task("digits", {}, [](const TaskArgs&, uint64_t) { return nullptr; }); }).exit_code(), 2);
  EXPECT_EQ(error_of([] { register_task("odd", {{"x", "complex", "", ""}}, [](const TaskArgs&, uint64_t) { return nullptr; }); })
                .exit_code(),
            2);
}

TEST(TaskRegistry, UnknownOptionNamesFileLineAndValidOptions) {
  auto e = error_of([] { make_task("teacher", options({{"hiden", "3"}}), 0); });
  EXPECT_EQ(e.exit_code(), 2);
  EXPECT_STREQ(e.what(),
               "run.toml:11: unknown option 'hiden' for task 'teacher'; valid options: inputs, hidden, samples, "
               "teacher_seed, noise, emulated_step_ms");
}

TEST(TaskRegistry, WrongTypeNamesTheExpectedType) {
  auto e = error_of([] { make_task("teacher", options({{"hidden", "3.5"}}), 0); });
  EXPECT_EQ(e.exit_code(), 2);
  EXPECT_STREQ(e.what(), "run.toml:11: option 'hidden' for task 'teacher' must be an int (an integer such as 128), "
                         "got '3.5'");
  e = error_of([] { make_task("teacher", options({{"noise", "lots"}}), 0); });
  EXPECT_NE(std::string(e.what()).find("option 'noise' for task 'teacher' must be a float"), std::string::npos);
  // An integer is a valid float.
  EXPECT_NO_THROW(make_task("teacher", options({{"noise", "1"}, {"samples", "8"}}), 0));
}

TEST(TaskRegistry, OutOfRangeValuesNameTheOption) {
  auto e = error_of([] { make_task("teacher", options({{"hidden", "0"}}), 0); });
  EXPECT_EQ(e.exit_code(), 2);
  EXPECT_STREQ(e.what(), "run.toml:11: option 'hidden' for task 'teacher' must be at least 1, got 0");
  e = error_of([] { make_task("digits", options({{"test_fraction", "1.5"}}), 0); });
  EXPECT_NE(std::string(e.what()).find("option 'test_fraction' for task 'digits' must be in [0, 1)"),
            std::string::npos);
  std::string text = write_text("heads.txt", 200);
  e = error_of([&] { make_task("charlm", options({{"path", text}, {"d_model", "30"}, {"heads", "4"}}), 0); });
  EXPECT_EQ(e.exit_code(), 2);
  EXPECT_NE(std::string(e.what()).find("option 'heads' for task 'charlm' must divide d_model (30)"), std::string::npos);
  std::remove(text.c_str());
  e = error_of([] { make_task("teacher", options({{"emulated_step_ms", "-1"}}), 0); });
  EXPECT_EQ(e.exit_code(), 2);
  EXPECT_NE(std::string(e.what()).find("option 'emulated_step_ms' for task 'teacher' must be in [0, 10000], got -1"),
            std::string::npos)
      << e.what();
}

TEST(Teacher, EmulatedStepWaitsInEachTrainingBatchsLoss) {
  auto task = make_task("teacher", options({{"emulated_step_ms", "40"}}), 1);
  Batch batch = task->train_data().get({0, 1});
  const auto start = std::chrono::steady_clock::now();
  auto loss = task->loss(batch);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(40));
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
}

TEST(Digits, MissingFileNamesPathAndPackage) {
  auto e = error_of([] { make_task("digits", options({{"path", "/nonexistent/digits.csv.gz"}}), 0); });
  EXPECT_EQ(e.exit_code(), 2);
  std::string what = e.what();
  EXPECT_NE(what.find("run.toml:11"), std::string::npos) << what;
  EXPECT_NE(what.find("/nonexistent/digits.csv.gz"), std::string::npos) << what;
  EXPECT_NE(what.find("install Debian's python3-sklearn, or set [task] path"), std::string::npos) << what;
}

TEST(Digits, MalformedFileNamesTheLine) {
  std::string path = write_text("digits.csv", 3);
  auto e = error_of([&] { make_task("digits", options({{"path", path}}), 0); });
  EXPECT_EQ(e.exit_code(), 2);
  EXPECT_NE(std::string(e.what()).find("line 1 is not 64 pixel values"), std::string::npos) << e.what();
  std::remove(path.c_str());
}

TEST(Digits, DefaultsShapesAndFixedSplit) {
  if (!digits_installed()) GTEST_SKIP() << kDigitsPath << " missing (python3-sklearn)";
  auto task = make_task("digits", {}, 1);
  EXPECT_EQ(task->name(), "digits");
  EXPECT_EQ(task->headline_metric(), "accuracy");
  ASSERT_NE(task->validation_data(), nullptr);
  EXPECT_EQ(task->train_data().size() + task->validation_data()->size(), 1797);
  EXPECT_EQ(task->validation_data()->size(), 359);
  Batch batch = task->train_data().get({0, 5, 7});
  EXPECT_EQ(batch.size, 3);
  EXPECT_EQ(batch.input.sizes(), (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(batch.input.dtype(), torch::kFloat);
  EXPECT_EQ(batch.target.sizes(), (std::vector<int64_t>{3}));
  EXPECT_EQ(batch.target.dtype(), torch::kLong);
  EXPECT_GE(batch.input.min().item<float>(), 0.0f);
  EXPECT_LE(batch.input.max().item<float>(), 1.0f);
  // The split depends on split_seed only, never on the run seed.
  auto other = make_task("digits", {}, 2);
  std::vector<int64_t> all(task->validation_data()->size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  EXPECT_TRUE(torch::equal(task->validation_data()->get(all).input, other->validation_data()->get(all).input));
  auto resplit = make_task("digits", options({{"split_seed", "5"}}), 1);
  EXPECT_FALSE(torch::equal(task->validation_data()->get(all).input, resplit->validation_data()->get(all).input));
  EXPECT_THROW(task->train_data().get({task->train_data().size()}), Error);
}

TEST(Digits, ReachesNinetyFivePercentTestAccuracy) {
  if (!digits_installed()) GTEST_SKIP() << kDigitsPath << " missing (python3-sklearn)";
  auto start = std::chrono::steady_clock::now();
  auto task = make_task("digits", {}, 0);
  double before = task->evaluate(*task->validation_data()).at("accuracy");
  auto losses = train(*task, 400, 64, 1e-3);
  Metrics after = task->evaluate(*task->validation_data());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "digits: test accuracy " << before << " -> " << after.at("accuracy") << ", loss " << after.at("loss")
            << " after 400 Adam steps of 64 in " << seconds << " s\n";
  EXPECT_GE(after.at("accuracy"), 0.95);
  EXPECT_LT(mean(losses, 370, 400), mean(losses, 0, 30));
}

TEST(Teacher, DefaultsShapesAndLearning) {
  auto task = make_task("teacher", {}, 3);
  EXPECT_EQ(task->headline_metric(), "loss");
  EXPECT_EQ(task->train_data().size(), 4096);
  ASSERT_NE(task->validation_data(), nullptr);
  EXPECT_EQ(task->validation_data()->size(), 1024);
  Batch batch = task->train_data().get({1, 2});
  EXPECT_EQ(batch.input.sizes(), (std::vector<int64_t>{2, 16}));
  EXPECT_EQ(batch.target.sizes(), (std::vector<int64_t>{2, 1}));
  double before = task->evaluate(*task->validation_data()).at("loss");
  auto losses = train(*task, 30, 64, 1e-2);
  EXPECT_LT(mean(losses, 25, 30), mean(losses, 0, 5));
  EXPECT_LT(task->evaluate(*task->validation_data()).at("loss"), before);
}

TEST(Teacher, DataDependsOnTeacherSeedOnly) {
  auto a = make_task("teacher", {}, 1), b = make_task("teacher", {}, 2);
  auto c = make_task("teacher", options({{"teacher_seed", "7"}}), 1);
  std::vector<int64_t> first{0, 1, 2, 3};
  EXPECT_TRUE(torch::equal(a->train_data().get(first).target, b->train_data().get(first).target));
  EXPECT_FALSE(torch::equal(a->train_data().get(first).target, c->train_data().get(first).target));
  EXPECT_FALSE(torch::equal(a->train_data().get(first).input, a->validation_data()->get(first).input));
  auto noisy = make_task("teacher", options({{"noise", "0.5"}}), 1);
  EXPECT_TRUE(torch::equal(a->train_data().get(first).input, noisy->train_data().get(first).input));
  EXPECT_FALSE(torch::equal(a->train_data().get(first).target, noisy->train_data().get(first).target));
}

TEST(CharLM, PathIsRequiredAndChecked) {
  auto e = error_of([] { make_task("charlm", {}, 0); });
  EXPECT_EQ(e.exit_code(), 2);
  EXPECT_NE(std::string(e.what()).find("option 'path' for task 'charlm' is required"), std::string::npos) << e.what();
  e = error_of([] { make_task("charlm", options({{"path", "/nonexistent/book.txt"}}), 0); });
  EXPECT_EQ(e.exit_code(), 2);
  EXPECT_NE(std::string(e.what()).find("run.toml:11: option 'path' for task 'charlm' names '/nonexistent/book.txt'"),
            std::string::npos)
      << e.what();
  std::string tiny = write_text("tiny.txt", 2);
  e = error_of([&] { make_task("charlm", options({{"path", tiny}}), 0); });
  EXPECT_EQ(e.exit_code(), 2);
  EXPECT_NE(std::string(e.what()).find("needs at least 130"), std::string::npos) << e.what();
  std::remove(tiny.c_str());
}

TEST(CharLM, DefaultsShapesAndLearning) {
  std::string path = write_text("charlm.txt", 2000);
  auto defaults = make_task("charlm", options({{"path", path}}), 0);
  EXPECT_EQ(defaults->headline_metric(), "bpc");
  Batch batch = defaults->train_data().get({0, 1, 9});
  EXPECT_EQ(batch.input.sizes(), (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(batch.target.sizes(), (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(batch.input.dtype(), torch::kLong);
  // The target is the input shifted by one byte.
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::equal(batch.input.index({Slice(), Slice(1, 64)}), batch.target.index({Slice(), Slice(0, 63)})));
  EXPECT_TRUE(torch::equal(batch.input[1].slice(0, 0, 63), batch.input[0].slice(0, 1, 64)));
  int64_t total = defaults->train_data().size() + defaults->validation_data()->size() + 2 * 64;
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  EXPECT_EQ(total, static_cast<int64_t>(file.tellg()));
  std::cout << "charlm parameters at defaults: " << parameter_count(*defaults) << "\n";

  auto task = make_task("charlm", small_charlm(path), 0);
  Metrics before = task->evaluate(*task->validation_data());
  EXPECT_NEAR(before.at("bpc"), before.at("loss") / std::log(2.0), 1e-9);
  auto losses = train(*task, 30, 16, 3e-3);
  EXPECT_LT(mean(losses, 25, 30), mean(losses, 0, 5) - 0.5);
  EXPECT_LT(task->evaluate(*task->validation_data()).at("loss"), before.at("loss"));
  std::remove(path.c_str());
}

TEST(CharLM, SizesFromAHundredThousandToTwentyMillionParameters) {
  std::string path = write_text("sizes.txt", 100);
  auto small = make_task("charlm", options({{"path", path}, {"d_model", "64"}, {"layers", "1"}, {"ffn", "256"}}), 0);
  auto large = make_task("charlm", options({{"path", path}, {"d_model", "512"}, {"layers", "6"}, {"ffn", "2048"}}), 0);
  std::cout << "charlm parameters: " << parameter_count(*small) << " (d_model 64, layers 1, ffn 256), "
            << parameter_count(*large) << " (d_model 512, layers 6, ffn 2048)\n";
  EXPECT_LT(parameter_count(*small), 100'000);
  EXPECT_GT(parameter_count(*large), 19'000'000);
  EXPECT_LT(parameter_count(*large), 20'000'000);
  auto logits_loss = large->loss(large->train_data().get({0, 1}));
  EXPECT_TRUE(std::isfinite(logits_loss.item<double>()));
  std::remove(path.c_str());
}

TEST(Seeding, SameSeedSameInitialParameters) {
  std::string path = write_text("seed.txt", 200);
  for (const auto& name : task_names()) {
    if (name == "digits" && !digits_installed()) continue;
    if (name == "torchscript") continue;  // its weights come with the module file
    TaskOptions opts = name == "charlm" ? small_charlm(path) : TaskOptions{};
    auto a = make_task(name, opts, 11), b = make_task(name, opts, 11), c = make_task(name, opts, 12);
    auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
    ASSERT_EQ(pa.size(), pb.size());
    bool all_same_as_c = true;
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i].first, pb[i].first) << name;
      EXPECT_TRUE(torch::equal(pa[i].second, pb[i].second)) << name << " " << pa[i].first;
      all_same_as_c = all_same_as_c && torch::equal(pa[i].second, pc[i].second);
    }
    EXPECT_FALSE(all_same_as_c) << name << ": seeds 11 and 12 gave the same weights";
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace loom::train
