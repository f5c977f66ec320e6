// SPDX-License-Identifier: Apache-2.0
// ucx_rank: one rank of a multi-process ucx plugin test, started by
// ucx_test (the driver), which serves the store and may kill ranks.
//
//   ucx_rank --rank R --size N --port P --scenario NAME [--timeout-ms T]
//            [--victim V] [--iterations K] [--option key=value]...
//
// Scenarios: kill_during_allreduce, kill_between_ops, leak, mismatch,
// algorithms, back_to_back. Results are "RESULT key value" lines on stdout; the exit code
// is 0 when the rank saw what the scenario expects, 1 when not, 2 on a usage
// error.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "loom/status.hpp"
#include "rank_common.hpp"

namespace {

bool parse(int argc, char** argv, ucx_rank::Args* a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--rank") a->rank = std::atoi(value.c_str());
    else if (key == "--size") a->size = std::atoi(value.c_str());
    else if (key == "--port") a->port = std::atoi(value.c_str());
    else if (key == "--scenario") a->scenario = value;
    else if (key == "--timeout-ms") a->timeout_ms = std::atoll(value.c_str());
    else if (key == "--victim") a->victim = std::atoi(value.c_str());
    else if (key == "--iterations") a->iterations = std::atoi(value.c_str());
    else if (key == "--option" && value.find('=') != std::string::npos)
      a->options[value.substr(0, value.find('='))] = value.substr(value.find('=') + 1);
    else return false;
  }
  return argc % 2 == 1 && a->rank >= 0 && a->size > a->rank && a->port > 0 && !a->scenario.empty();
}

}  // namespace

int main(int argc, char** argv) {
  ucx_rank::Args args;
  if (!parse(argc, argv, &args)) {
    std::fprintf(stderr, "usage: ucx_rank --rank R --size N --port P --scenario NAME [--timeout-ms T] [--victim V] "
                         "[--iterations K] [--option key=value]...\n");
    return 2;
  }
  const struct {
    const char* name;
    ucx_rank::Scenario run;
  } scenarios[] = {{"kill_during_allreduce", ucx_rank::scenario_kill_during_allreduce},
                   {"kill_between_ops", ucx_rank::scenario_kill_between_ops},
                   {"abort_during_allreduce", ucx_rank::scenario_abort_during_allreduce},
                   {"leak", ucx_rank::scenario_leak},
                   {"mismatch", ucx_rank::scenario_mismatch},
                   {"algorithms", ucx_rank::scenario_algorithms},
                   {"back_to_back", ucx_rank::scenario_back_to_back}};
  for (const auto& s : scenarios) {
    if (args.scenario != s.name) continue;
    try {
      ucx_rank::Rank rank(args);
      return s.run(rank);
    } catch (const std::exception& e) {
      ucx_rank::report("error", std::string("\"") + e.what() + "\"");
      return 1;
    }
  }
  std::fprintf(stderr, "ucx_rank: unknown scenario '%s'\n", args.scenario.c_str());
  return 2;
}
