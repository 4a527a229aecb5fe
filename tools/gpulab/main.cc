// gpulab: the command-line tool. Subcommands live one per file in this folder.
#include <cstdio>

#include "cli.h"
#include "core/file_io.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "gpulab/version.h"

namespace gpulab::cli {

int report(const Status& status) {
  if (status.is_ok()) return 0;
  std::fflush(stdout);
  std::fprintf(stderr, "gpulab: %s\n", status.to_string().c_str());
  return exit_code_for(status.code());
}

std::string process_command_line() {
  auto text = read_file_text("/proc/self/cmdline");
  if (!text.is_ok()) return {};
  std::string out = *text;
  while (!out.empty() && out.back() == '\0') out.pop_back();
  for (char& c : out) {
    if (c == '\0') c = ' ';
  }
  return out;
}

int report_skipped(const std::vector<InputError>& errors, size_t total) {
  if (errors.empty()) return 0;
  std::fflush(stdout);
  for (const InputError& e : errors)
    std::fprintf(stderr, "gpulab: skipped '%s': %s\n", e.path.string().c_str(), e.status.to_string().c_str());
  if (errors.size() < total) {
    std::fprintf(stderr, "gpulab: %zu of %zu input(s) skipped (exit code %d)\n", errors.size(), total,
                 kExitSomeInputsFailed);
    return kExitSomeInputsFailed;
  }
  return exit_code_for(errors.front().status.code());
}

void on_run(CLI::App* sub, std::function<int()> body) {
  sub->callback([body = std::move(body)] {
    const int code = body();
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace gpulab::cli

int main(int argc, char** argv) {
  using namespace gpulab;
  install_interrupt_handlers();  // SIGINT/SIGTERM leave no partial output file (core/interrupt.h)
  CLI::App app{"gpulab: fast image-model inference on NVIDIA GPUs, and why it is as fast as it is"};
#ifdef GPULAB_HAVE_DOCTOR
  app.set_version_flag("--version", [] {
    std::string text = cli::version_text();
    if (!text.empty() && text.back() == '\n') text.pop_back();  // CLI11 ends the line itself
    return text;
  });
#else
  app.set_version_flag("--version", std::string("gpulab ") + GPULAB_VERSION);
#endif
  app.require_subcommand(1);
  app.fallthrough();
  // Flag callbacks run as the flags are parsed, before any subcommand's callback.
  app.add_flag_callback(
      "-v,--verbose", [] { set_log_level(LogLevel::kDebug); }, "Log what each stage does");
  app.add_flag_callback(
      "-q,--quiet", [] { set_log_level(LogLevel::kError); }, "Only print errors");

#ifdef GPULAB_HAVE_DOCTOR
  cli::add_doctor_command(app);
#endif
  cli::add_classify_command(app);
  cli::add_pipeline_command(app);
  cli::add_inspect_command(app);
  cli::add_build_command(app);     // without a CUDA build it says so and exits non-zero
  cli::add_bench_command(app);     // always: without a GPU runtime it says so and exits non-zero
  cli::add_sweep_command(app);     // always: --simulate runs anywhere; a model needs the GPU runtime
  cli::add_accuracy_command(app);  // CPU emulation: runs everywhere
#ifdef GPULAB_HAVE_DOCTOR
  cli::add_version_command(app);
#endif
#ifdef GPULAB_HAVE_TELEMETRY
  cli::add_monitor_command(app);
  cli::add_bandwidth_command(app);
#endif
#ifdef GPULAB_HAVE_REPORT
  cli::add_report_command(app);
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return app.exit(e);  // a command's own exit code (on_run above), as it is
  } catch (const CLI::ParseError& e) {
    // app.exit prints the help, the version or the error. CLI11's own codes for errors (105 for a
    // value outside its set, 106 for a missing option, ...) are all bad arguments to a user:
    // exit 2, as the README's exit codes say.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}
