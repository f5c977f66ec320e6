// SPDX-License-Identifier: Apache-2.0
// What `loom plugins check` needs around the conformance kit: finding it,
// naming its cases' operations and dtypes, reading its reports back and
// printing them as a table.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
#include "loom/plugin.h"

namespace loom::cli {

struct CheckArgs {
  std::string target;  // NAME, or PATH to a lib<name>_<kind>.so
  std::string kind;    // "", "collective" or "strategy"
  int nproc = 1;       // -n
  std::vector<std::string> ops;      // --op (repeatable)
  std::vector<std::string> options;  // --option KEY=VALUE (repeatable)
  int64_t timeout_ms = 20000;        // --timeout-ms: every wait of the kit
  std::string device = "cpu";        // --device cpu|cuda
  bool quick = false;                // --quick: one allreduce in this process
};

int check_plugin(const GlobalOptions& global, const CheckArgs& args);

// The plugin a NAME or PATH names. For a PATH, folder is its (absolute)
// folder and kind comes from the file name; Error::usage when the file is
// missing or not named lib<name>_<kind>.so, or its kind contradicts kind.
struct Target {
  std::string name;
  loom_kind kind = 0;  // 0: any
  std::string folder;
};
Target resolve_target(const std::string& target, const std::string& kind);

// The kit's executable: $LOOM_CONFORMANCE, else loom_conformance next to
// this loom (a build tree), else <libexecdir>/loom/loom_conformance as
// installed. Error::runtime naming where it looked when there is none.
std::string find_kit();
// A helper program installed beside loom: loom's own folder (a build tree's
// bin/), then <libexecdir>/loom. Its path, or empty with *looked listing
// where it was looked for.
std::string find_beside_loom(const std::string& name, std::string* looked);
// "Suite.test" for every case the kit has (--gtest_list_tests).
std::vector<std::string> list_cases(const std::string& kit);

// --op words (allreduce, broadcast, reduce, allgather, reduce_scatter,
// alltoall, barrier, send_recv, allreduce_scaled) as case_op names them;
// Error::usage naming the valid ones for any other.
std::set<std::string> parse_ops(const std::vector<std::string>& words);
// The operation a case exercises ("allreduce", "send/recv"...), or "(all)"
// for a rule over every operation (argument errors, abort, ...).
std::string case_op(const std::string& suite, const std::string& test);
// The dtype in a case's name ("f32"), or "-".
std::string case_dtype(const std::string& test);

struct KitCase {
  std::string suite, test, result, message;  // result: passed, failed or skipped
};
struct KitReport {
  std::vector<KitCase> cases_run;  // merged over ranks: failed if any rank failed
  int cases = 0, passed = 0, failed = 0, skipped = 0;
};
// Reads PREFIX.<rank>.jsonl for ranks [0, nproc); a missing or cut file
// counts what it holds (a rank that died wrote less).
KitReport read_reports(const std::string& prefix, int nproc);
// One row per rule, operation and dtype, with the counts and the first
// failure's (or skip's) message.
void print_report(const KitReport& report, std::ostream& out);

std::string join(const std::vector<std::string>& words, const std::string& sep = ", ");

}  // namespace loom::cli
