// cuDNN engine configurations as tactic strings, for the graph-API wrappers (cudnn_conv.cc,
// cudnn_q8_conv.cc). A configuration is written "<engine id>;<knob id>=<value>,...;<engine name>"
// after a tactic prefix ("cudnn:", "cudnn-unfused:", "cudnn-q8:"), knobs sorted by id, so that a
// plan file rebuilds exactly the configuration that was timed; the name is for people and is
// ignored when parsing. Plain strings and integers: no cuDNN header needed (cudnn_graph.h converts).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpulab/status.h"

namespace gpulab::cuda {

struct CudnnEngineConfig {
  int64_t engine = 0;
  std::vector<std::pair<int, int64_t>> knobs;  // (cuDNN knob type id, value), sorted by id
};

// "<engine id>[;<knobs>[;<name>]]" (the part after the prefix) -> engine and knobs; invalid_argument
// naming `tactic` (the whole string, for the message) when it does not parse.
Result<CudnnEngineConfig> parse_cudnn_engine_config(std::string_view body, std::string_view tactic);

// prefix + "<engine>;<knobs>;<name>", knobs sorted by id.
std::string format_cudnn_engine_config(std::string_view prefix, CudnnEngineConfig config,
                                       std::string_view name);

}  // namespace gpulab::cuda
