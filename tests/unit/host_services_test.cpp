// SPDX-License-Identifier: Apache-2.0
// The host-services table as a plugin sees it: options, store, logging.
#include <gtest/gtest.h>

#include "../../core/src/host_services.hpp"
#include "loom/host.hpp"

namespace loom {
namespace {

PluginDescriptor descriptor() {
  PluginDescriptor d;
  d.name = "fake";
  d.abi_version = LOOM_ABI_VERSION;
  d.options = {{"timeout_ms", LOOM_OPTION_INT, std::string("1000"), "wait timeout"},
               {"fast", LOOM_OPTION_BOOL, std::string("false"), "go fast"},
               {"ratio", LOOM_OPTION_FLOAT, std::string("0.5"), "a ratio"},
               {"peers", LOOM_OPTION_STRING_LIST, std::nullopt, "required list"}};
  return d;
}

PluginCandidate candidate() { return {"/x/libfake_collective.so", "fake", LOOM_KIND_COLLECTIVE, "test"}; }

TEST(HostServices, OptionsGiveConfiguredValuesOrDefaults) {
  auto ctx = make_host_context(nullptr, candidate(), descriptor(), {{"peers", "a,b"}, {"fast", "true"}}, 0, 1, 0);
  const loom_host_v1& host = ctx->table;
  EXPECT_EQ(host.struct_size, sizeof(loom_host_v1));
  const char* value = nullptr;
  ASSERT_EQ(host.get_option(host.host_ctx, "timeout_ms", &value), LOOM_OK);
  EXPECT_STREQ(value, "1000");
  ASSERT_EQ(host.get_option(host.host_ctx, "fast", &value), LOOM_OK);
  EXPECT_STREQ(value, "true");
  ASSERT_EQ(host.get_option(host.host_ctx, "peers", &value), LOOM_OK);
  EXPECT_STREQ(value, "a,b");
  EXPECT_EQ(host.get_option(host.host_ctx, "undeclared", &value), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(host.rank, 0);
  EXPECT_EQ(host.world_size, 1);
}

TEST(HostServices, UnknownOptionListsTheValidOnes) {
  try {
    make_host_context(nullptr, candidate(), descriptor(), {{"peers", "a"}, {"timeout", "5"}}, 0, 1, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("unknown option 'timeout'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("timeout_ms, fast, ratio, peers"), std::string::npos) << e.what();
  }
}

TEST(HostServices, WrongTypesAndMissingRequiredOptionsAreUsageErrors) {
  EXPECT_THROW(make_host_context(nullptr, candidate(), descriptor(), {{"peers", "a"}, {"timeout_ms", "soon"}}, 0, 1, 0),
               Error);
  EXPECT_THROW(make_host_context(nullptr, candidate(), descriptor(), {{"peers", "a"}, {"fast", "yes"}}, 0, 1, 0), Error);
  EXPECT_THROW(make_host_context(nullptr, candidate(), descriptor(), {{"peers", "a"}, {"ratio", "1/2"}}, 0, 1, 0), Error);
  try {
    make_host_context(nullptr, candidate(), descriptor(), {}, 0, 1, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("option 'peers'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("required"), std::string::npos) << e.what();
  }
}

TEST(HostServices, StoreGoesThroughTheHostsStore) {
  HostConfig config;
  Host host(config, JobInfo{});  // one process: an in-process store
  auto ctx = make_host_context(&host, candidate(), descriptor(), {{"peers", "a"}}, 0, 1, 0);
  const loom_host_v1& t = ctx->table;
  ASSERT_EQ(t.store_set(t.host_ctx, "key", "abc", 3), LOOM_OK);
  char buf[8];
  size_t len = 0;
  ASSERT_EQ(t.store_get(t.host_ctx, "key", buf, sizeof buf, &len, 1000), LOOM_OK);
  EXPECT_EQ(std::string(buf, len), "abc");
  EXPECT_EQ(t.store_get(t.host_ctx, "key", buf, 2, &len, 1000), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(len, 3u);  // tells the caller how much room it needs
  EXPECT_EQ(t.store_get(t.host_ctx, "absent", buf, sizeof buf, &len, 50), LOOM_ERR_TIMEOUT);
  int64_t n = 0;
  ASSERT_EQ(t.store_add(t.host_ctx, "n", 5, &n), LOOM_OK);
  ASSERT_EQ(t.store_add(t.host_ctx, "n", -2, &n), LOOM_OK);
  EXPECT_EQ(n, 3);
  t.log(t.host_ctx, LOOM_LOG_INFO, "hello from a plugin");
}

TEST(HostServices, NoStoreInAMultiProcessJobWithoutMasterAddr) {
  HostConfig config;
  JobInfo job;
  job.world_size = 2;
  Host host(config, job);
  auto ctx = make_host_context(&host, candidate(), descriptor(), {{"peers", "a"}}, 0, 2, 0);
  const loom_host_v1& t = ctx->table;
  EXPECT_EQ(t.store_set(t.host_ctx, "key", "abc", 3), LOOM_ERR_UNAVAILABLE);
}

}  // namespace
}  // namespace loom
