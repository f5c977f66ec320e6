// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "loom/config.hpp"
#include "loom/job.hpp"

namespace loom {
namespace {

class JobEnv : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"}) {
      unsetenv(v);
    }
  }
};

TEST_F(JobEnv, AloneIsRankZeroOfOne) {
  JobInfo job = JobInfo::from_environment();
  EXPECT_EQ(job.rank, 0);
  EXPECT_EQ(job.world_size, 1);
  EXPECT_TRUE(job.master_addr.empty());
  EXPECT_EQ(job.launcher, "none");
}

TEST_F(JobEnv, TorchrunVariables) {
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29511", 1);
  JobInfo job = JobInfo::from_environment();
  EXPECT_EQ(job.rank, 2);
  EXPECT_EQ(job.world_size, 4);
  EXPECT_EQ(job.local_rank, 0);
  EXPECT_EQ(job.master_port, 29511);
  EXPECT_EQ(job.launcher, "torchrun-env");
}

TEST_F(JobEnv, MpirunVariablesFillIn) {
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  JobInfo job = JobInfo::from_environment();
  EXPECT_EQ(job.rank, 1);
  EXPECT_EQ(job.world_size, 3);
  EXPECT_EQ(job.launcher, "mpirun");
}

TEST_F(JobEnv, MalformedValuesAreUsageErrorsNamingTheVariable) {
  setenv("RANK", "abc", 1);
  try {
    JobInfo::from_environment();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("RANK=abc"), std::string::npos) << e.what();
  }
  setenv("RANK", "4", 1);
  setenv("WORLD_SIZE", "4", 1);
  EXPECT_THROW(JobInfo::from_environment(), Error);
  setenv("RANK", "0", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  EXPECT_THROW(JobInfo::from_environment(), Error);  // no MASTER_PORT
  setenv("MASTER_PORT", "70000", 1);
  EXPECT_THROW(JobInfo::from_environment(), Error);
}

std::string write_config(const std::string& text) {
  char tmpl[] = "/tmp/loom-config-XXXXXX";
  int fd = mkstemp(tmpl);
  close(fd);
  std::ofstream(tmpl) << text;
  return tmpl;
}

TEST(HostConfigFile, ReadsPluginPathsAndCollectiveOptions) {
  std::string path = write_config(
      "[plugins]\npath = [\"/opt/loom\", \"relative\"]\n"
      "[collective]\nname = \"mpi\"\n[collective.options]\ntimeout_ms = 5000\nflag = true\nratio = 0.25\n"
      "[trainer]\nmax_steps = 3\n");
  HostFileConfig c = load_host_config(path);
  ASSERT_EQ(c.plugin_paths.size(), 2u);
  EXPECT_EQ(c.plugin_paths[0], "/opt/loom");
  EXPECT_EQ(c.plugin_paths[1], "/tmp/relative");
  EXPECT_EQ(c.collective, "mpi");
  auto& options = c.options[{LOOM_KIND_COLLECTIVE, "mpi"}];
  EXPECT_EQ(options["timeout_ms"], "5000");
  EXPECT_EQ(options["flag"], "true");
  EXPECT_EQ(options["ratio"], "0.25");
  std::remove(path.c_str());
}

TEST(HostConfigFile, ErrorsNameFileLineAndKey) {
  std::string path = write_config("[plugins]\n\npaths = \"/x\"\n");
  try {
    load_host_config(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find(path + ":3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("valid keys: path"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
  path = write_config("[collective]\nname = \n");
  try {
    load_host_config(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find(path + ":2"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace loom
