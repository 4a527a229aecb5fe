// The flags that change how a plan is built, shared by `gpulab build` and `gpulab bench --model`:
// one declaration, one check and one mapping onto BuildOptions for both.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "gpulab/engine.h"
#include "gpulab/status.h"

namespace gpulab::cli {

struct BuildFlags {
  std::string timing_cache;
  bool no_stem_space_to_depth = false;
  bool no_fuse_stem = false;
  bool no_fold_casts = false;
  std::string batch_chunks;  // "" (default: fallback), off, fallback, search
  bool no_batch_chunks = false;
  std::optional<int64_t> max_workspace_mib;
  std::optional<int64_t> tactic_batch;
};

// The largest --max-workspace-mib (1 TiB).
inline constexpr int64_t kMaxWorkspaceMib = int64_t{1} << 20;

// Declares --timing-cache, --no-stem-space-to-depth, --no-fuse-stem, --no-fold-casts,
// --batch-chunks, --no-batch-chunks, --max-workspace-mib and --tactic-batch on `sub`;
// `help_prefix` starts each help text ("[--model] " for bench).
void add_build_flags(CLI::App* sub, BuildFlags* flags, std::string_view help_prefix = "");

// BuildOptions with the flags' fields set (the rest as default), or kInvalidArgument naming
// --max-workspace-mib when it is outside 0..kMaxWorkspaceMib, --tactic-batch when it is outside
// 1..1048576, or --batch-chunks when its mode is not known or --no-batch-chunks contradicts it.
Result<BuildOptions> build_options_from(const BuildFlags& flags);

// With a plan (`bench --plan`, `pipeline --plan`), flags that change how --model is built would do
// nothing: kInvalidArgument naming the first one given (`also_given` first: a command's own build
// flag, e.g. pipeline's --no-tactic-timing, or nullptr) and the plan. OK without a plan.
Status refuse_build_flags_with_plan(const BuildFlags& flags, const std::string& plan_path,
                                    const char* also_given = nullptr);

}  // namespace gpulab::cli
