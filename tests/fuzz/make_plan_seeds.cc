// Writes the plan seeds of fuzz_plan: every ONNX seed that lowers, in FP32, FP16 and BF16 (the
// precision policy's casts, a space-to-depth stem), as the plan files `gpulab build` writes
// (without timed tactics: those are strings the fuzzer mutates all the same).
//   make_plan_seeds ONNX_SEED_DIR OUT_DIR
#include <cstdio>
#include <filesystem>
#include <string>

#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "plan/lower.h"
#include "plan/plan.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using namespace gpulab;
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_plan_seeds ONNX_SEED_DIR OUT_DIR\n");
    return 2;
  }
  fs::create_directories(argv[2]);
  int written = 0;
  for (const auto& entry : fs::directory_iterator(argv[1])) {
    auto graph = load_onnx(entry.path());
    if (!graph.is_ok() || !run_passes(*graph).is_ok()) continue;
    for (Precision precision : {Precision::kFp32, Precision::kFp16, Precision::kBf16}) {
      BuildOptions options;
      options.precision = precision;
      options.max_batch = 4;
      auto plan = lower_graph(*graph, options);
      if (!plan.is_ok()) continue;
      const fs::path out = fs::path(argv[2]) / (entry.path().stem().string() + "." +
                                                std::string(precision_name(precision)) + ".plan");
      if (!save_plan(*plan, out).is_ok()) return 1;
      ++written;
    }
  }
  std::printf("make_plan_seeds: %d plans in %s\n", written, argv[2]);
  return written > 0 ? 0 : 1;
}
