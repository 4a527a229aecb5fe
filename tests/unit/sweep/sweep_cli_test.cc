// `gpulab sweep` end to end on machines without a GPU: the simulated target, NVML telemetry and the
// power-limit axis through the fake NVML (tests/support/fake_nvml.cc), SIGTERM with the power limit
// restored and the partial JSON resumable, and clear errors for bad input.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CliRun;
using testing::run_gpulab;

class SweepCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(testing::gpulab_exe()))
      GTEST_SKIP() << "gpulab binary not built at " << testing::gpulab_exe();
    dir_ = fs::temp_directory_path() / ("gpulab-sweep-cli-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path write(const std::string& name, const json& doc) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << doc.dump(2);
    return p;
  }
  static json read_json(const fs::path& p) {
    std::ifstream in(p);
    return json::parse(in, nullptr, false);
  }
  // A small simulated GPU: 18 fp16 images fit (100 + 20 + 18 x 10 <= 300 MiB).
  fs::path scenario(double point_delay_ms = 0) {
    return write(
        "scenario.json",
        {{"gpu_name", "Simulated test GPU"},
         {"memory_mib", 300},
         {"baseline_used_mib", 100},
         {"power_limit_w", 700},
         {"watts_per_tflops", 2},
         {"point_delay_ms", point_delay_ms},
         {"precisions",
          {{"fp16", {{"launch_ms", 0.1}, {"per_image_ms", 0.01}, {"weights_mib", 20}, {"mib_per_image", 10}}},
           {"fp32",
            {{"launch_ms", 0.2}, {"per_image_ms", 0.03}, {"weights_mib", 40}, {"mib_per_image", 20}}}}}});
  }
  std::string fake_nvml_env(const fs::path& nvml_scenario) const {
    return "GPULAB_NVML_LIBRARY='" + std::string(GPULAB_FAKE_NVML) + "' GPULAB_FAKE_NVML_SCENARIO='" +
           nvml_scenario.string() + "'";
  }
  fs::path dir_;
};

TEST_F(SweepCli, SimulatedSweepWritesJsonCsvAndTheTable) {
  const fs::path out = dir_ / "sweep.json", csv = dir_ / "sweep.csv";
  const CliRun r = run_gpulab("sweep --simulate '" + scenario().string() +
                              "' --precisions fp16,fp32 --min-duration-s 0.05 "
                              "--warmup-ms 0 --telemetry none --json '" +
                              out.string() + "' --csv '" + csv.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.err.empty()) << r.err;  // no progress line when stderr is not a terminal
  EXPECT_NE(r.out.find("Recommendation:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("out of memory at context"), std::string::npos);
  const json doc = read_json(out);
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc["schema"], "gpulab.sweep");
  EXPECT_EQ(doc["state"], "complete");
  EXPECT_EQ(doc["target"]["kind"], "simulated");
  EXPECT_NE(doc["environment"]["command_line"].get<std::string>().find("sweep --simulate"),
            std::string::npos);
  EXPECT_FALSE(doc["environment"]["gpulab_commit"].is_null());
  EXPECT_EQ(doc["recommendations"][0]["largest_fitting_batch"], 18);
  std::ifstream in(csv);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')), doc["points"].size() + 1);
}

TEST_F(SweepCli, BadInputGetsAClearMessageAndExitCode) {
  const std::string sim = "sweep --simulate '" + scenario().string() + "' --telemetry none ";
  const std::string mobilenet = std::string(GPULAB_SOURCE_DIR) + "/models/mobilenet_v2_1.0_224.onnx";
  const struct {
    std::string args;
    int exit_code;
    std::string message;
  } cases[] = {
      {sim + "--precisions fp16,fp64", 2, "--precisions: 'fp64' is not a precision"},
      {sim + "--batches 8,4", 2, "must be strictly increasing"},
      {sim + "--batches 1,x", 2, "--batches: 'x' is not a batch size"},
      {sim + "--latency-budget-ms 0", 2, "--latency-budget-ms: 0 is not a positive number"},
      {sim + "--latency-budget-ms -3", 2, "--latency-budget-ms"},
      {sim + "--accuracy-gate 2", 2, "--accuracy-gate: 2 is not a fraction"},
      {sim + "--dataset /nonexistent/photos", 3, "--dataset: '/nonexistent/photos' is not a folder"},
      {sim + "--threshold compute_share=x", 2, "--threshold: compute_share='x'"},
      {sim + "--percentiles 50,90", 2, "the sweep needs p99"},
      {sim + "--power-limits 300", 2, "Add --allow-power-limit-change"},
      {sim + "--resume /nonexistent.json", 3, "--resume: '/nonexistent.json' is not a file"},
      {"sweep", 2, "sweep: no model"},
      {"sweep --model /nonexistent.onnx", 3, "--model: '/nonexistent.onnx' is not a file"},
      {"sweep --simulate /nonexistent.json", 3, "--simulate: '/nonexistent.json' is not a file"},
      // 8-bit plans need activation ranges, from somewhere that exists (a simulation needs none).
      {"sweep --model '" + mobilenet + "' --precisions fp16,int8 --telemetry none", 2,
       "int8 and fp8 plans need activation ranges"},
      {"sweep --model '" + mobilenet + "' --precisions fp8 --calibration-data /nonexistent/photos", 3,
       "--calibration-data: '/nonexistent/photos' is not a folder"},
  };
  for (const auto& c : cases) {
    const CliRun r = run_gpulab(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args << "\n" << r.output;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
  // A malformed scenario is an invalid file, named.
  const fs::path bad = dir_ / "bad.json";
  std::ofstream(bad) << "{\"precisions\": {\"fp16\": {\"launch_ms\": \"fast\"}}}";
  const CliRun r = run_gpulab("sweep --telemetry none --simulate '" + bad.string() + "'");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.err.find("precisions.fp16.launch_ms has the wrong type"), std::string::npos) << r.err;
}

TEST_F(SweepCli, ASimulatedInt8SweepNeedsNoCalibration) {
  json doc = read_json(scenario());
  doc["precisions"]["int8"] = {
      {"launch_ms", 0.05}, {"per_image_ms", 0.004}, {"weights_mib", 10}, {"mib_per_image", 5}};
  const fs::path out = dir_ / "sweep.json";
  const CliRun r = run_gpulab("sweep --simulate '" + write("int8.json", doc).string() +
                              "' --precisions fp16,int8 --min-duration-s 0.05 --warmup-ms 0 --telemetry none "
                              "--json '" +
                              out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json result = read_json(out);
  EXPECT_EQ(result["options"]["precisions"], json({"fp16", "int8"}));
  EXPECT_TRUE(result["calibration"].is_null());
  // int8 holds twice as many images as fp16 in the simulated memory: (300 - 100 - 10) / 5 = 38.
  EXPECT_EQ(result["recommendations"][1]["precision"], "int8");
  EXPECT_EQ(result["recommendations"][1]["largest_fitting_batch"], 38) << result["recommendations"].dump(2);
}

TEST_F(SweepCli, AModelNeedsTheGpuRuntime) {
#ifdef GPULAB_TEST_HAVE_RUNTIME
  GTEST_SKIP() << "this build has the CUDA runtime: the GPU tests cover a real sweep";
#endif
  const CliRun r = run_gpulab("sweep --model '" + std::string(GPULAB_SOURCE_DIR) +
                              "/models/mobilenet_v2_1.0_224.onnx' --telemetry none");
  EXPECT_EQ(r.exit_code, 8) << r.output;
  EXPECT_NE(r.err.find("built without the CUDA runtime"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--simulate"), std::string::npos) << r.err;
}

TEST_F(SweepCli, NvmlTelemetryFromTheFakeLibrary) {
  const fs::path nvml = write("nvml.json", {{"driver_version", "580.65.06"},
                                            {"devices",
                                             {{{"name", "NVIDIA H200"},
                                               {"readings",
                                                {{"power_w", 250},
                                                 {"energy_w", 400},
                                                 {"pcie_rx_kb_s", 4096},
                                                 {"clock_event_reasons", 4},
                                                 {"sm_clock_mhz", 1700}}}}}}});
  const fs::path out = dir_ / "sweep.json";
  // Each simulated point takes 300 ms of real time, which NVML is sampled over.
  const CliRun r = run_gpulab("sweep --simulate '" + scenario(/*point_delay_ms=*/300).string() +
                                  "' --precisions fp16 --batches 1,4 --min-duration-s 0.3 --warmup-ms 0 "
                                  "--telemetry nvml --sample-period-ms 20 --json '" +
                                  out.string() + "'",
                              fake_nvml_env(nvml));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json doc = read_json(out);
  EXPECT_EQ(doc["environment"]["driver_version"], "580.65.06");
  EXPECT_EQ(doc["environment"]["gpu_name"], "NVIDIA H200");
  for (const json& p : doc["points"]) {
    const json& t = p["telemetry"];
    ASSERT_GT(t["samples"].get<int>(), 3) << p;
    // The mean power is the energy counter's (400 W here), not the readings' (250 W): NVML's
    // reading lags a short window. Within 1%: the counter and the timestamps are whole ms.
    EXPECT_NEAR(t["power_mean_w"].get<double>(), 400, 4) << t;
    EXPECT_DOUBLE_EQ(t["power_max_w"].get<double>(), 250);
    EXPECT_EQ(t["energy_source"], "counter");
    EXPECT_DOUBLE_EQ(t["sm_clock_mean_mhz"].get<double>(), 1700);
    EXPECT_DOUBLE_EQ(t["clock_event_reason_shares"]["sw_power_cap"].get<double>(), 1.0);
    EXPECT_GT(t["pcie_rx_bytes_per_image"].get<double>(), 0);
    // The fake's process list names another pid (4242): this process's memory is unknown.
    EXPECT_TRUE(t["memory_used_process_max_bytes"].is_null());
  }
  // The sampled power cap (sw_power_cap with the clock at 1700 of 1980 MHz) is a verdict.
  EXPECT_EQ(doc["points"][1]["verdicts"][0]["kind"], "power-capped") << doc["points"][1]["verdicts"];

  const CliRun missing = run_gpulab("sweep --simulate '" + scenario().string() + "' --telemetry nvml",
                                    "GPULAB_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(missing.exit_code, 8) << missing.output;
  EXPECT_NE(missing.err.find("GPULAB_NVML_LIBRARY names '/nonexistent/libnvidia-ml.so.1'"), std::string::npos)
      << missing.err;
}

// stderr as the process sees it when it is a terminal (a pseudo-terminal here).
std::string stderr_on_a_terminal(const std::vector<std::string>& args) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);  // stdout away; stderr stays the terminal
    std::vector<char*> argv;
    const std::string exe = testing::gpulab_exe().string();
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(master, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::waitpid(pid, nullptr, 0);
  ::close(master);
  return out;
}

TEST_F(SweepCli, ProgressOnATerminalOnly) {
  const std::vector<std::string> args = {"sweep",
                                         "--simulate",
                                         scenario(/*point_delay_ms=*/20).string(),
                                         "--precisions",
                                         "fp16",
                                         "--telemetry",
                                         "none",
                                         "--min-duration-s",
                                         "0.05"};
  const std::string progress = stderr_on_a_terminal(args);
  EXPECT_NE(progress.find("sweep: point 1 of ~"), std::string::npos) << progress;
  EXPECT_NE(progress.find("fp16 batch 16 (grow)"), std::string::npos) << progress;
  EXPECT_NE(progress.find("left"), std::string::npos) << progress;
  std::vector<std::string> quiet = args;
  quiet.insert(quiet.begin(), "--quiet");
  EXPECT_EQ(stderr_on_a_terminal(quiet).find("sweep: point"), std::string::npos);
}

TEST_F(SweepCli, SeveralSimulatedGpus) {
  json doc = {
      {"memory_mib", 300},
      {"baseline_used_mib", 100},
      {"precisions",
       {{"fp16", {{"launch_ms", 0.1}, {"per_image_ms", 0.01}, {"weights_mib", 20}, {"mib_per_image", 10}}}}},
      {"gpus", {json::object(), {{"memory_mib", 200}}}}};
  const fs::path sim = write("gpus.json", doc);
  const fs::path out = dir_ / "sweep.json";
  const CliRun r = run_gpulab("sweep --simulate '" + sim.string() +
                              "' --gpus 0,1 --precisions fp16 --min-duration-s 0.05 --warmup-ms 0 --json '" +
                              out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.out.find("Per GPU"), std::string::npos) << r.out;
  const json result = read_json(out);
  EXPECT_EQ(result["target"]["description"], "2 x simulated (" + sim.string() + ") (GPUs 0, 1)");
  EXPECT_EQ(result["options"]["gpus"], json({0, 1}));
  // GPU 1 has 200 MiB: 8 images fit there (100 + 20 + 8 x 10), so 8 for the pair.
  EXPECT_EQ(result["recommendations"][0]["largest_fitting_batch"], 8);
  EXPECT_EQ(result["points"][0]["per_gpu"].size(), 2u);
  const CliRun bad = run_gpulab("sweep --simulate '" + sim.string() + "' --gpus 0,0 --telemetry none");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.err.find("GPU 0 is listed twice"), std::string::npos) << bad.err;
  const CliRun both = run_gpulab("sweep --simulate '" + sim.string() + "' --gpus 0,1 --device 1");
  EXPECT_NE(both.exit_code, 0);
}

json nvml_with_state(const fs::path& state) {
  return {{"state_file", state.string()},
          {"devices", {{{"power_limit_w", 700}, {"power_limit_min_w", 200}, {"power_limit_max_w", 700}}}}};
}

double limit_in(const fs::path& state) {
  std::ifstream in(state);
  const json s = json::parse(in, nullptr, false);
  return s.is_object() ? s["power_limit_w"][0].get<double>() : -1;
}

TEST_F(SweepCli, PowerLimitAxisRestoresTheOriginalLimit) {
  if (::geteuid() != 0) GTEST_SKIP() << "--power-limits needs root";
  const fs::path state = dir_ / "nvml-state.json";
  const fs::path nvml = write("nvml.json", nvml_with_state(state));
  const fs::path out = dir_ / "sweep.json";
  const CliRun r = run_gpulab("sweep --simulate '" + scenario().string() +
                                  "' --precisions fp16 --batches 16 --min-duration-s 0.05 --warmup-ms 0 "
                                  "--power-limits 300,450 --allow-power-limit-change --json '" +
                                  out.string() + "'",
                              fake_nvml_env(nvml));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(limit_in(state), 700);  // set to 300, then 450, then back
  const json doc = read_json(out);
  ASSERT_EQ(doc["points"].size(), 2u);
  EXPECT_EQ(doc["points"][0]["power_limit_w"], 300);
  EXPECT_EQ(doc["points"][1]["power_limit_w"], 450);
  // The simulation follows NVML's limit: the lower one caps harder.
  EXPECT_GT(doc["points"][0]["metrics"]["gpu_compute_ms"]["median"].get<double>(),
            doc["points"][1]["metrics"]["gpu_compute_ms"]["median"].get<double>());
  // Outside the GPU's range: NVML's refusal, and the limit is left as it was.
  const CliRun outside = run_gpulab("sweep --simulate '" + scenario().string() +
                                        "' --batches 1 --power-limits 900 --allow-power-limit-change",
                                    fake_nvml_env(nvml));
  EXPECT_EQ(outside.exit_code, 2) << outside.output;
  EXPECT_NE(outside.err.find("900 W is outside GPU 0's range 200-700 W"), std::string::npos) << outside.err;
  EXPECT_EQ(limit_in(state), 700);
}

// Starts gpulab with `args` and extra environment variables; returns its pid.
pid_t spawn_gpulab(const std::vector<std::string>& args,
                   const std::vector<std::pair<std::string, std::string>>& env, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    const std::string exe = testing::gpulab_exe().string();
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

TEST_F(SweepCli, SigtermRestoresThePowerLimitAndTheSweepResumes) {
  if (::geteuid() != 0) GTEST_SKIP() << "--power-limits needs root";
  const fs::path state = dir_ / "nvml-state.json";
  const fs::path nvml = write("nvml.json", nvml_with_state(state));
  const fs::path sim = scenario(/*point_delay_ms=*/400);
  const fs::path out = dir_ / "sweep.json";
  const std::vector<std::string> args = {"sweep",      "--simulate",
                                         sim.string(), "--precisions",
                                         "fp16",       "--max-batch",
                                         "16",         "--min-duration-s",
                                         "0.05",       "--warmup-ms",
                                         "0",          "--power-limits",
                                         "350",        "--allow-power-limit-change",
                                         "--json",     out.string()};
  const std::vector<std::pair<std::string, std::string>> env = {{"GPULAB_NVML_LIBRARY", GPULAB_FAKE_NVML},
                                                                {"GPULAB_FAKE_NVML_SCENARIO", nvml.string()}};
  const pid_t pid = spawn_gpulab(args, env, dir_ / "log.txt");
  ASSERT_GT(pid, 0);
  // Wait until two points are on disk and the limit is the sweep's.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  size_t points = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const json doc = read_json(out);
    points = doc.is_object() ? doc["points"].size() : 0;
    if (points >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(points, 2u);
  EXPECT_EQ(limit_in(state), 350);
  const auto signalled = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const double exit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 143);
  EXPECT_LT(exit_s, 5.0);  // the current point ends, then the sweep stops (a 10 s grace at most)
  EXPECT_EQ(limit_in(state), 700);
  const json partial = read_json(out);
  ASSERT_TRUE(partial.is_object());  // complete JSON, never half-written
  EXPECT_EQ(partial["state"], "interrupted");
  const size_t measured = partial["points"].size();
  EXPECT_GE(measured, 2u);

  // --resume measures only what is left, under the same limit, and restores it again.
  const CliRun resumed =
      run_gpulab("sweep --simulate '" + sim.string() +
                     "' --precisions fp16 --max-batch 16 --min-duration-s 0.05 --warmup-ms 0 "
                     "--power-limits 350 --allow-power-limit-change --resume '" +
                     out.string() + "'",
                 fake_nvml_env(nvml));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const json done = read_json(out);
  EXPECT_EQ(done["state"], "complete");
  ASSERT_EQ(done["points"].size(), 5u);  // 1, 2, 4, 8, 16
  for (size_t i = 0; i < measured; ++i) EXPECT_EQ(done["points"][i], partial["points"][i]) << i;
  EXPECT_EQ(limit_in(state), 700);

  // Resuming another GPU's sweep is refused.
  json elsewhere = done;
  elsewhere["target"]["description"] = "NVIDIA H100 80GB HBM3 (sm_90)";
  const fs::path other_gpu = write("other_gpu.json", elsewhere);
  const CliRun moved = run_gpulab("sweep --telemetry none --simulate '" + sim.string() + "' --resume '" +
                                  other_gpu.string() + "'");
  EXPECT_EQ(moved.exit_code, 2) << moved.output;
  EXPECT_NE(moved.err.find("was measured on NVIDIA H100 80GB HBM3 (sm_90); this sweep runs on simulated"),
            std::string::npos)
      << moved.err;

  // Resuming another model's sweep is refused.
  const fs::path other = write("other.json", {{"memory_mib", 999}});
  const CliRun wrong = run_gpulab("sweep --telemetry none --simulate '" + other.string() + "' --resume '" +
                                  out.string() + "'");
  EXPECT_EQ(wrong.exit_code, 2) << wrong.output;
  EXPECT_NE(wrong.err.find("is a sweep of another model"), std::string::npos) << wrong.err;
}

}  // namespace
}  // namespace gpulab
