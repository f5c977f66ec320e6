// SPDX-License-Identifier: Apache-2.0
#include "report.hpp"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace conformance {
namespace {

class ReportWriter : public testing::EmptyTestEventListener {
 public:
  explicit ReportWriter(std::FILE* file) : file_(file) {}
  ~ReportWriter() override { std::fclose(file_); }

  void OnTestStart(const testing::TestInfo&) override { message_.clear(); }

  void OnTestPartResult(const testing::TestPartResult& part) override {
    if (!message_.empty()) return;  // the first one says most
    if (part.failed() || part.skipped()) message_ = part.message();
  }

  void OnTestEnd(const testing::TestInfo& info) override {
    const testing::TestResult* r = info.result();
    const char* result = r->Failed() ? "failed" : r->Skipped() ? "skipped" : "passed";
    const nlohmann::json line = {{"suite", info.test_suite_name()},
                                 {"test", info.name()},
                                 {"result", result},
                                 {"message", message_}};
    // Invalid UTF-8 in a plugin's message must not end the report.
    const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fputs(text.c_str(), file_);
    std::fflush(file_);
  }

 private:
  std::FILE* file_;
  std::string message_;
};

}  // namespace

std::unique_ptr<testing::TestEventListener> make_report_writer(const std::string& prefix, int rank,
                                                               std::string* error) {
  const std::string path = prefix + "." + std::to_string(rank) + ".jsonl";
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    *error = "cannot write the report " + path;
    return nullptr;
  }
  return std::make_unique<ReportWriter>(file);
}

}  // namespace conformance
