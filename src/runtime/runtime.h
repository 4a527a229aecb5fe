// Internal entry points of the runtime beyond the public gpulab/engine.h (tests, bench).
#pragma once

#include <memory>

#include "gpulab/engine.h"
#include "graph/graph.h"

namespace gpulab {

// As Engine::build_from_onnx, for a Graph in memory (classify, tests). With `apply_passes`, a copy
// of the graph goes through run_passes first; pass false for a graph that already did (or that a
// test wants unfused).
Result<std::shared_ptr<Engine>> build_engine_from_graph(const Graph& graph, const BuildOptions& options,
                                                        bool apply_passes = true);

}  // namespace gpulab
