// SPDX-License-Identifier: Apache-2.0
// report.hpp: --report PREFIX, one JSON object per case and line in
// PREFIX.<rank>.jsonl, for `loom plugins check` to read back:
//
//   {"suite": "Allreduce", "test": "Exact/f32_sum_blocking",
//    "result": "passed" | "failed" | "skipped", "message": "..."}
//
// message is the first failure's text, or the reason given for a skip.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace conformance {

// A listener that writes the report; nullptr (with *error) when the file
// cannot be opened.
std::unique_ptr<testing::TestEventListener> make_report_writer(const std::string& prefix, int rank,
                                                               std::string* error);

}  // namespace conformance
