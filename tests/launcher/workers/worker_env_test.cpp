// The worker environment, variable by variable, against what torchrun sets.
#include <gtest/gtest.h>

#include "workers/openblas.h"
#include "workers/worker_env.h"

namespace ddp::launcher {
namespace {

TEST(WorkerEnv, TorchrunsVariables) {
  WorkerPlace place{.rank = 5,
                    .local_rank = 1,
                    .world_size = 8,
                    .local_world_size = 4,
                    .node_rank = 1,
                    .nnodes = 2,
                    .restart_count = 2};
  JobEnv job{.master_addr = "10.0.0.1", .master_port = 29500, .run_id = "job7", .role = "default", .max_restarts = 3};
  const auto env = worker_environment(place, job, map_env({}));
  const std::map<std::string, std::string> expected = {
      {"RANK", "5"},
      {"LOCAL_RANK", "1"},
      {"WORLD_SIZE", "8"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_RANK", "5"},
      {"ROLE_WORLD_SIZE", "8"},
      {"ROLE_NAME", "default"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_RESTART_COUNT", "2"},
      {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"TORCHELASTIC_RUN_ID", "job7"},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"DDP_STORE_PROTOCOL", "ddp"},
      {"NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"OMP_NUM_THREADS", "1"},
  };
  EXPECT_EQ(env, expected);
}

TEST(WorkerEnv, OmpNumThreadsOnlyWhenUnsetAndSeveralWorkers) {
  WorkerPlace one{.local_world_size = 1};
  WorkerPlace two{.local_world_size = 2};
  EXPECT_FALSE(worker_environment(one, {}, map_env({})).count("OMP_NUM_THREADS"));
  EXPECT_EQ(worker_environment(two, {}, map_env({})).at("OMP_NUM_THREADS"), "1");
  EXPECT_FALSE(worker_environment(two, {}, map_env({{"OMP_NUM_THREADS", "8"}})).count("OMP_NUM_THREADS"));
  EXPECT_TRUE(needs_omp_default(map_env({}), 2));
  EXPECT_FALSE(needs_omp_default(map_env({{"OMP_NUM_THREADS", "4"}}), 2));
  EXPECT_FALSE(needs_omp_default(map_env({}), 1));
}

TEST(WorkerEnv, KeepsTheUsersNcclSettingAndAddsTheErrorFile) {
  JobEnv job;
  job.error_file = "/logs/rank_0.error.json";
  const auto env = worker_environment({}, job, map_env({{"NCCL_ASYNC_ERROR_HANDLING", "0"}}));
  EXPECT_FALSE(env.count("NCCL_ASYNC_ERROR_HANDLING"));  // inherited as the user set it
  EXPECT_EQ(env.at("TORCHELASTIC_ERROR_FILE"), "/logs/rank_0.error.json");
  EXPECT_FALSE(env.count("DDP_CHECKPOINT_RECORD"));
}

TEST(WorkerEnv, NamesTheCheckpointRecord) {
  JobEnv job;
  job.checkpoint_record = "/tmp/ddprun-checkpoints-x/rank_3";
  EXPECT_EQ(worker_environment({}, job, map_env({})).at("DDP_CHECKPOINT_RECORD"), "/tmp/ddprun-checkpoints-x/rank_3");
  EXPECT_FALSE(worker_environment({}, job, map_env({})).count("DDP_STRAGGLER_REPORT"));
  job.straggler_report = "/tmp/ddprun-checkpoints-x/straggler_report";
  EXPECT_EQ(worker_environment({}, job, map_env({})).at("DDP_STRAGGLER_REPORT"), job.straggler_report);
}

TEST(WorkerEnv, SetsNoAccelerateVariableWithoutTheFlags) {
  const auto env = worker_environment({}, {}, map_env({}));
  for (const char* name :
       {"ACCELERATE_MIXED_PRECISION", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "ACCELERATE_USE_CPU"}) {
    EXPECT_FALSE(env.count(name)) << name;
  }
}

TEST(WorkerEnv, PassesTheAccelerateFlags) {
  JobEnv job;
  job.accelerate.mixed_precision = "fp16";
  job.accelerate.gradient_accumulation_steps = 8;
  job.accelerate.cpu = true;
  const auto env = worker_environment({}, job, map_env({}));
  EXPECT_EQ(env.at("ACCELERATE_MIXED_PRECISION"), "fp16");
  EXPECT_EQ(env.at("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), "8");
  EXPECT_EQ(env.at("ACCELERATE_USE_CPU"), "true");
}

TEST(WorkerEnv, AGivenAccelerateFlagOverridesTheParentsVariable) {
  JobEnv job;
  job.accelerate.mixed_precision = "bf16";
  const auto env = worker_environment(
      {}, job, map_env({{"ACCELERATE_MIXED_PRECISION", "fp16"}, {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "2"}}));
  EXPECT_EQ(env.at("ACCELERATE_MIXED_PRECISION"), "bf16");
  EXPECT_FALSE(env.count("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"));  // not given: the parent's 2 is inherited
}

TEST(WorkerEnv, KeepsTheParentsAccelerateVariablesWhenTheFlagsAreNotGiven) {
  const auto parent = map_env({{"ACCELERATE_MIXED_PRECISION", "fp16"},
                               {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"},
                               {"ACCELERATE_USE_CPU", "false"}});
  const auto env = worker_environment({}, {}, parent);
  // Absent from the overrides: the worker inherits ddprun's environment as it is.
  for (const char* name :
       {"ACCELERATE_MIXED_PRECISION", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "ACCELERATE_USE_CPU"}) {
    EXPECT_FALSE(env.count(name)) << name;
  }
}

TEST(WorkerEnv, OpenblasCoretypeWhenTheJobNamesOneAndDdprunsEnvironmentDoesNot) {
  JobEnv job;
  EXPECT_FALSE(worker_environment({}, job, map_env({})).count("OPENBLAS_CORETYPE"));
  job.openblas_coretype = "SkylakeX";
  EXPECT_EQ(worker_environment({}, job, map_env({})).at("OPENBLAS_CORETYPE"), "SkylakeX");
  // The user's own choice, in ddprun's environment, reaches the workers as it is.
  EXPECT_FALSE(worker_environment({}, job, map_env({{"OPENBLAS_CORETYPE", "Haswell"}})).count("OPENBLAS_CORETYPE"));
}

TEST(OpenblasCoretype, AFallbackBelowTheCpusVectorUnitsGetsTheBestTheyCarry) {
  const CpuVectors avx512{.avx2_fma = true, .avx512 = true}, avx2{.avx2_fma = true}, sse{};
  EXPECT_EQ(openblas_coretype_for("Prescott", avx512), "SkylakeX");  // this VM's case
  EXPECT_EQ(openblas_coretype_for("prescott", avx2), "Haswell");
  EXPECT_EQ(openblas_coretype_for("Core2", avx2), "Haswell");
  EXPECT_EQ(openblas_coretype_for("Barcelona", avx2), "Haswell");
  EXPECT_EQ(openblas_coretype_for("Prescott", sse), std::nullopt);  // nothing better to give
  // A core OpenBLAS chose for the CPU it knows is left alone.
  for (const char* chosen : {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen", ""}) {
    EXPECT_EQ(openblas_coretype_for(chosen, avx512), std::nullopt) << chosen;
  }
}

TEST(OpenblasCoretype, ThisMachinesOpenblasIsAskedWhatItChose) {
  std::string chosen;
  const auto coretype = openblas_coretype_here(&chosen);
  if (chosen.empty()) GTEST_SKIP() << "no libopenblas.so.0 on this machine";
  // Set only where OpenBLAS fell back, and then to a core it knows.
  if (coretype) {
    EXPECT_TRUE(*coretype == "SkylakeX" || *coretype == "Haswell") << *coretype;
    EXPECT_EQ(openblas_coretype_for(chosen, {.avx2_fma = true, .avx512 = true}).has_value(), true) << chosen;
  }
}

}  // namespace
}  // namespace ddp::launcher
