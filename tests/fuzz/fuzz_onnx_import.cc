// ONNX import from bytes, and everything `gpulab inspect` and `gpulab build` do with the graph on
// the CPU: shape inference (inside the import), cost, the passes, the preprocessing the metadata
// asks for, lowering to a plan in FP32 and in BF16 (the precision policy, space-to-depth stem),
// and the plan file round trip. Malformed graphs get past the protobuf parser and break later,
// so the target follows them as far as a build goes.
//
// Invariants checked (abort, so libFuzzer keeps the input): a plan that lower_graph made is one
// that deserialize_plan accepts.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "graph/cost.h"
#include "image/preprocess.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "plan/lower.h"
#include "plan/plan.h"

namespace {

void check_plan_round_trip(const gpulab::Plan& plan) {
  auto back = gpulab::deserialize_plan(gpulab::serialize_plan(plan));
  if (!back.is_ok()) {
    std::fprintf(stderr, "lower_graph made a plan that deserialize_plan refuses: %s\n",
                 back.status().to_string().c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpulab;
  auto graph = load_onnx_bytes(std::as_bytes(std::span(data, size)), "fuzz.onnx");
  if (!graph.is_ok()) return 0;
  (void)graph_cost(*graph, 1);
  (void)preprocess_from_metadata(graph->metadata);
  Graph optimized = *graph;
  if (!run_passes(optimized).is_ok()) return 0;
  (void)graph_cost(optimized, 2);
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    BuildOptions options;
    options.precision = precision;
    options.max_batch = 2;
    auto plan = lower_graph(optimized, options);
    if (plan.is_ok()) check_plan_round_trip(*plan);
  }
  return 0;
}
