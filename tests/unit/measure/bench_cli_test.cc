// `gpulab bench` option parsing and validation, through the built executable: bad values end
// with a message naming the flag and the usage exit code, before any GPU work.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gpulab/status.h"
#include "test_support.h"

namespace gpulab {
namespace {

using gpulab::testing::CliRun;
using gpulab::testing::run_gpulab;

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(gpulab::testing::gpulab_exe())) {
      GTEST_SKIP() << "gpulab executable not built at " << gpulab::testing::gpulab_exe();
    }
    dir_ = std::filesystem::temp_directory_path() / ("gpulab_bench_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    model_ = (dir_ / "model.onnx").string();
    std::ofstream(model_) << "not an onnx model";
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
  std::string model_;
};

struct BadFlag {
  std::string args;
  std::string expected;  // in the message
};

TEST_F(BenchCli, BadValuesAreUsageErrorsNamingTheFlag) {
  const int usage = exit_code_for(StatusCode::kInvalidArgument);
  const BadFlag cases[] = {
      {"--batch 0", "--batch: 0"},
      {"--batch=-3", "--batch: -3"},
      {"--warmup-ms=-5", "--warmup-ms: -5"},
      {"--min-duration-s=-1", "--min-duration-s: -1"},
      {"--min-iterations 0", "--min-iterations: 0"},
      {"--streams 0", "--streams: 0 is outside 1..64"},
      {"--streams 65", "--streams: 65"},
      {"--percentiles 50,abc", "--percentiles: 'abc'"},
      {"--percentiles 0", "--percentiles: '0'"},
      {"--percentiles 99,100.5", "--percentiles: '100.5'"},
      {"--device=-1", "--device: -1"},
      {"--precision fp8", "--precision: 'fp8'"},
      {"--max-workspace-mib=-1", "--max-workspace-mib: -1 is outside 0..1048576"},
      {"--max-workspace-mib 1048577", "--max-workspace-mib: 1048577"},
      {"--tactic-batch 0", "--tactic-batch: 0 is outside 1..1048576"},
      {"--tactic-batch 1048577", "--tactic-batch: 1048577"},
      {"--json same.json --export-times same.json", "--json and --export-times"},
  };
  for (const BadFlag& c : cases) {
    const CliRun run = run_gpulab("bench --model " + model_ + " " + c.args);
    EXPECT_EQ(run.exit_code, usage) << c.args << "\n" << run.output;
    EXPECT_NE(run.output.find("gpulab: invalid argument: " + c.expected), std::string::npos) << c.args << "\n"
                                                                                             << run.output;
  }
}

TEST_F(BenchCli, ModelOrPlanIsRequired) {
  const CliRun none = run_gpulab("bench --batch 4");
  EXPECT_EQ(none.exit_code, exit_code_for(StatusCode::kInvalidArgument)) << none.output;
  EXPECT_NE(none.output.find("no model"), std::string::npos) << none.output;

  const CliRun both = run_gpulab("bench --model " + model_ + " --plan " + model_);
  EXPECT_NE(both.exit_code, 0) << both.output;
  EXPECT_NE(both.output.find("--plan"), std::string::npos) << both.output;

  const CliRun plan_precision = run_gpulab("bench --plan " + model_ + " --precision fp32");
  EXPECT_EQ(plan_precision.exit_code, exit_code_for(StatusCode::kInvalidArgument));
  EXPECT_NE(plan_precision.output.find("precision is fixed"), std::string::npos) << plan_precision.output;

  // Build options would be ignored for a plan: refused, naming the flag.
  for (const char* flag : {"--no-fuse-stem", "--no-fold-casts", "--no-batch-chunks", "--batch-chunks search",
                           "--no-stem-space-to-depth", "--max-workspace-mib 64", "--timing-cache tc.json",
                           "--tactic-batch 64"}) {
    const CliRun run = run_gpulab("bench --plan " + model_ + " " + flag);
    EXPECT_EQ(run.exit_code, exit_code_for(StatusCode::kInvalidArgument)) << flag << "\n" << run.output;
    const std::string name = std::string(flag).substr(0, std::string(flag).find(' '));
    EXPECT_NE(run.output.find("gpulab: invalid argument: " + name + ": it changes how --model is built"),
              std::string::npos)
        << run.output;
  }
}

// `gpulab build` declares and checks the same build flags (tools/gpulab/build_flags.h).
TEST_F(BenchCli, BuildChecksTheSharedBuildFlags) {
  const CliRun run =
      run_gpulab("build " + model_ + " -o " + (dir_ / "x.plan").string() + " --max-workspace-mib=-1");
  EXPECT_EQ(run.exit_code, exit_code_for(StatusCode::kInvalidArgument)) << run.output;
  EXPECT_NE(run.output.find("gpulab: invalid argument: --max-workspace-mib: -1 is outside 0..1048576"),
            std::string::npos)
      << run.output;
  const std::string plan = " -o " + (dir_ / "x.plan").string();
  const CliRun mode = run_gpulab("build " + model_ + plan + " --batch-chunks always");
  EXPECT_EQ(mode.exit_code, exit_code_for(StatusCode::kInvalidArgument)) << mode.output;
  EXPECT_NE(mode.output.find("gpulab: invalid argument: --batch-chunks: batch chunks 'always' is not known. "
                             "Use off, fallback or search."),
            std::string::npos)
      << mode.output;
  const CliRun both = run_gpulab("build " + model_ + plan + " --batch-chunks search --no-batch-chunks");
  EXPECT_EQ(both.exit_code, exit_code_for(StatusCode::kInvalidArgument)) << both.output;
  EXPECT_NE(both.output.find("--no-batch-chunks contradicts --batch-chunks search"), std::string::npos)
      << both.output;
  const CliRun help = run_gpulab("build --help");
  for (const char* flag : {"--timing-cache", "--no-stem-space-to-depth", "--no-fuse-stem", "--no-fold-casts",
                           "--batch-chunks", "--no-batch-chunks", "--max-workspace-mib", "--tactic-batch"})
    EXPECT_NE(help.output.find(flag), std::string::npos) << flag << "\n" << help.output;
}

TEST_F(BenchCli, MissingModelIsNotFound) {
  const CliRun run = run_gpulab("bench --model " + (dir_ / "absent.onnx").string());
  EXPECT_EQ(run.exit_code, exit_code_for(StatusCode::kNotFound)) << run.output;
  EXPECT_NE(run.output.find("--model: '"), std::string::npos) << run.output;
}

TEST_F(BenchCli, NonNumbersAreRejectedByTheParser) {
  const CliRun run = run_gpulab("bench --model " + model_ + " --batch abc");
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("--batch"), std::string::npos) << run.output;
}

TEST_F(BenchCli, ValidFlagsReachTheEngineOrSayWhyNot) {
  // The file is not a model. A CPU-only build says it has no CUDA runtime, a CUDA build without
  // a GPU says there is no usable GPU, a CUDA build with one refuses the model: all are one
  // clear line and a non-zero exit, never a crash.
  const CliRun run = run_gpulab("bench --model " + model_ +
                                " --batch 2 --warmup-ms 0 --min-duration-s 0 --min-iterations 1 "
                                "--no-cuda-graph --no-include-transfers --streams 2 "
                                "--percentiles 50,99.9 --device 0");
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_GT(run.exit_code, 2) << "valid flags must not be a usage error:\n" << run.output;
  EXPECT_NE(run.output.find("gpulab: "), std::string::npos) << run.output;
}

TEST_F(BenchCli, HelpListsEveryFlag) {
  const CliRun run = run_gpulab("bench --help");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* flag : {"--model",
                           "--plan",
                           "--batch",
                           "--precision",
                           "--warmup-ms",
                           "--min-duration-s",
                           "--min-iterations",
                           "--cuda-graph",
                           "--no-cuda-graph",
                           "--include-transfers",
                           "--no-include-transfers",
                           "--streams",
                           "--percentiles",
                           "--json",
                           "--export-times",
                           "--device",
                           "--profile",
                           "--ceilings",
                           "--no-fold-casts",
                           "--batch-chunks",
                           "--no-batch-chunks",
                           "--max-workspace-mib",
                           "--tactic-batch"}) {
    EXPECT_NE(run.output.find(flag), std::string::npos) << flag << "\n" << run.output;
  }
}

}  // namespace
}  // namespace gpulab
