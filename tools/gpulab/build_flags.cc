#include "build_flags.h"

#include <fmt/format.h>

#include <utility>

namespace gpulab::cli {

void add_build_flags(CLI::App* sub, BuildFlags* flags, std::string_view help_prefix) {
  const auto help = [help_prefix](std::string_view text) {
    return std::string(help_prefix) + std::string(text);
  };
  sub->add_option("--timing-cache", flags->timing_cache,
                  help("Timing cache file: read before tactic timing, updated after it"));
  sub->add_flag("--no-stem-space-to-depth", flags->no_stem_space_to_depth,
                help("Keep a strided few-channel stem convolution as it is (no space-to-depth rewrite)"));
  sub->add_flag("--no-fuse-stem", flags->no_fuse_stem,
                help("Keep the stem's input conversion, convolution and max pool as three steps (no fused "
                     "stem kernel)"));
  sub->add_flag("--no-fold-casts", flags->no_fold_casts,
                help("Keep the float32 copy of each 16-bit input a float32 depthwise layer reads (BF16 "
                     "MobileNetV2) instead of reading it directly"));
  sub->add_option("--batch-chunks", flags->batch_chunks,
                  help("Max batch above 256: when to also time a layer as batch-256 cuDNN launches over the "
                       "batch in chunks: off, fallback (default: where nothing ran over the whole batch) "
                       "or search (also every layer over 1 ms; a longer build)"));
  sub->add_flag("--no-batch-chunks", flags->no_batch_chunks, help("The same as --batch-chunks off"));
  sub->add_option(
      "--max-workspace-mib", flags->max_workspace_mib,
      help("Skip cuDNN candidates that need more workspace than this (MiB; 0..1048576; default: a "
           "quarter of the GPU's free memory)"));
  sub->add_option(
      "--tactic-batch", flags->tactic_batch,
      help("Time convolution tactics at this batch when it is below the max batch, and use them at "
           "the max batch (checked there): a much shorter build that shares the timing cache's "
           "entries for this batch (default: time at the max batch)"));
}

Result<BuildOptions> build_options_from(const BuildFlags& flags) {
  if (flags.max_workspace_mib &&
      (*flags.max_workspace_mib < 0 || *flags.max_workspace_mib > kMaxWorkspaceMib)) {
    return Status::invalid_argument(
        fmt::format("--max-workspace-mib: {} is outside 0..{}. Give the most workspace, in MiB, a cuDNN "
                    "candidate may use (without it: a quarter of the GPU's free memory).",
                    *flags.max_workspace_mib, kMaxWorkspaceMib));
  }
  if (flags.tactic_batch && (*flags.tactic_batch < 1 || *flags.tactic_batch > (int64_t{1} << 20))) {
    return Status::invalid_argument(
        fmt::format("--tactic-batch: {} is outside 1..1048576. Give the batch to time tactics at (below the "
                    "max batch to shorten the build).",
                    *flags.tactic_batch));
  }
  BuildOptions options;
  if (!flags.batch_chunks.empty()) {
    Result<BatchChunks> mode = parse_batch_chunks(flags.batch_chunks);
    if (!mode.is_ok()) return Status::invalid_argument("--batch-chunks: " + mode.status().message());
    if (flags.no_batch_chunks && *mode != BatchChunks::kOff)
      return Status::invalid_argument(fmt::format(
          "--no-batch-chunks contradicts --batch-chunks {}: give one of them.", flags.batch_chunks));
    options.batch_chunks = *mode;
  }
  if (flags.no_batch_chunks) options.batch_chunks = BatchChunks::kOff;
  options.timing_cache_path = flags.timing_cache;
  options.stem_space_to_depth = !flags.no_stem_space_to_depth;
  options.fuse_stem = !flags.no_fuse_stem;
  options.fold_input_casts = !flags.no_fold_casts;
  if (flags.max_workspace_mib) options.max_workspace_bytes = *flags.max_workspace_mib << 20;
  if (flags.tactic_batch) options.tactic_batch = *flags.tactic_batch;
  return options;
}

Status refuse_build_flags_with_plan(const BuildFlags& flags, const std::string& plan_path,
                                    const char* also_given) {
  if (plan_path.empty()) return Status::ok();
  const auto refuse = [&plan_path](const char* flag) {
    return Status::invalid_argument(fmt::format(
        "{}: it changes how --model is built; the plan '{}' was built already. Drop {}, or pass it to "
        "`gpulab build`.",
        flag, plan_path, flag));
  };
  if (also_given) return refuse(also_given);
  const std::pair<const char*, bool> given[] = {{"--timing-cache", !flags.timing_cache.empty()},
                                                {"--no-stem-space-to-depth", flags.no_stem_space_to_depth},
                                                {"--no-fuse-stem", flags.no_fuse_stem},
                                                {"--no-fold-casts", flags.no_fold_casts},
                                                {"--batch-chunks", !flags.batch_chunks.empty()},
                                                {"--no-batch-chunks", flags.no_batch_chunks},
                                                {"--max-workspace-mib", flags.max_workspace_mib.has_value()},
                                                {"--tactic-batch", flags.tactic_batch.has_value()}};
  for (const auto& [flag, is_given] : given)
    if (is_given) return refuse(flag);
  return Status::ok();
}

}  // namespace gpulab::cli
