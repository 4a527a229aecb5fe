// gpulab version / gpulab --version: gpulab's version and commit, and per component (CUDA
// runtime and driver, cuDNN, cuBLAS, cuDNN frontend, CUTLASS) the version it was built with and the
// one it finds at run time.
#ifdef GPULAB_HAVE_DOCTOR

#include <cstdio>

#include <fmt/format.h>

#include "cli.h"
#include "doctor/versions.h"
#include "gpulab/build_versions.h"
#include "gpulab/git_commit.h"
#include "gpulab/version.h"

namespace gpulab::cli {
namespace {

std::string headline() {
  return fmt::format("gpulab {} (commit {}, {} build, {})", GPULAB_VERSION, GPULAB_GIT_COMMIT,
                     GPULAB_BUILD_TYPE,
#ifdef GPULAB_HAVE_RUNTIME
                     "with the CUDA engine"
#else
                     "CPU only: no CUDA engine"
#endif
  );
}

std::vector<doctor::ComponentVersion> rows() {
  return doctor::component_versions(doctor::BuiltVersions::of_this_build(), doctor::FoundVersions::probe());
}

}  // namespace

std::string version_text() {
  return doctor::format_versions(headline(), rows());
}

void add_version_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand(
      "version",
      "gpulab's version and commit; CUDA, cuDNN, cuBLAS, cuDNN frontend and CUTLASS built with and found");
  sub->add_flag("--json", *json, "Print as JSON");
  on_run(sub, [json] {
    if (*json) {
      const nlohmann::json out{{"gpulab_version", GPULAB_VERSION},
                               {"gpulab_commit", GPULAB_GIT_COMMIT},
                               {"build_type", GPULAB_BUILD_TYPE},
#ifdef GPULAB_HAVE_RUNTIME
                               {"cuda_engine", true},
#else
                               {"cuda_engine", false},
#endif
                               {"components", doctor::versions_to_json(rows())}};
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      std::printf("%s", version_text().c_str());
    }
    return 0;
  });
}

}  // namespace gpulab::cli

#endif  // GPULAB_HAVE_DOCTOR
