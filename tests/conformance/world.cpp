// SPDX-License-Identifier: Apache-2.0
// world.cpp: the Host, the plugin instance and the world communicator.
#include "world.hpp"

#include <utility>

#include "case_data.hpp"
#include "loom/job.hpp"
#include "loom/plugin_path.hpp"

namespace conformance {
namespace {

struct State {
  SuiteOptions options;
  std::unique_ptr<loom::Host> host;
  std::shared_ptr<loom::Collective> collective;
  std::unique_ptr<loom::Communicator> comm;
};

State& state() {
  static State s;
  return s;
}

loom::CommOptions comm_options(const std::string& name, int64_t timeout_ms = 0) {
  const loom::JobInfo& job = state().host->job();
  loom::CommOptions o;
  o.rank = job.rank;
  o.size = job.world_size;
  o.timeout = std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : state().options.timeout_ms);
  o.name = name;
  if (state().options.device == "cuda") {
    o.device_type = LOOM_DEVICE_CUDA;
    o.device_id = state().options.device_id;
  }
  return o;
}

}  // namespace

void World::open(const SuiteOptions& options) {
  State& s = state();
  s.options = options;
  loom::HostConfig config;
  config.search_path = loom::plugin_search_path(options.plugin_paths, {});
  // Checked against the plugin's declared options when it is opened.
  for (const auto& [key, value] : options.plugin_options) {
    config.options[{LOOM_KIND_COLLECTIVE, options.plugin}][key] = value;
    config.option_sources[{LOOM_KIND_COLLECTIVE, options.plugin}][key] = "--option";
  }
  s.host = std::make_unique<loom::Host>(std::move(config), loom::JobInfo::from_environment());
  s.collective = s.host->open_collective(options.plugin);
  loom::check(s.collective->create_comm(comm_options("conformance-world"), &s.comm),
              "creating the world communicator of plugin " + options.plugin);
}

void World::close() {
  State& s = state();
  s.comm.reset();
  s.collective.reset();
  s.host.reset();
}

const SuiteOptions& World::options() { return state().options; }
loom::Host& World::host() { return *state().host; }
loom::Collective& World::collective() { return *state().collective; }
loom::Communicator& World::comm() { return *state().comm; }
int World::rank() { return state().comm->rank(); }
int World::size() { return state().comm->size(); }

loom::Status World::create_comm(const std::string& name, std::unique_ptr<loom::Communicator>* comm,
                                int64_t timeout_ms) {
  return state().collective->create_comm(comm_options(name, timeout_ms), comm);
}

testing::AssertionResult still_works(loom::Communicator& comm) {
  Buffer one(LOOM_DTYPE_I32, 1), total(LOOM_DTYPE_I32, 1);
  one.set(0, 1);
  const loom::Status s = comm.allreduce(one.data(), total.data(), 1, LOOM_DTYPE_I32, LOOM_REDUCE_SUM);
  if (!s.is_ok()) return testing::AssertionFailure() << "allreduce of one i32: " << s.to_string();
  if (total.get(0) != comm.size())
    return testing::AssertionFailure() << "allreduce of one i32 summed to " << total.get(0) << ", not " << comm.size();
  return testing::AssertionSuccess();
}

testing::AssertionResult is_ok(const loom::Status& status) {
  if (status.is_ok()) return testing::AssertionSuccess();
  return testing::AssertionFailure() << status.to_string();
}

testing::AssertionResult has_code(const loom::Status& status, loom_status code) {
  if (status.code() == code) return testing::AssertionSuccess() << status.to_string();
  return testing::AssertionFailure() << "expected " << loom_status_name(code) << ", got " << status.to_string();
}

std::string absent_names(uint64_t ops) {
  std::string names;
  for (const auto& name : loom::op_names(ops & World::collective().descriptor().absent_ops))
    names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace conformance
