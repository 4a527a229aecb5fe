// Shared plumbing of the CLI's subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include <vector>

#include "gpulab/status.h"
#include "pipeline/pipeline.h"

namespace gpulab::cli {

// Prints "gpulab: <code>: <message>" on stderr and returns the exit code for the Status
// (0 when ok).
int report(const Status& status);

// In a subcommand body returning int: report a failed Status/Result and return its exit code.
#define GPULAB_TRY_CLI(expr)                                                           \
  do {                                                                                 \
    ::gpulab::Status gpulab_cli_status_ = ::gpulab::detail::to_status(expr);           \
    if (!gpulab_cli_status_.is_ok()) return ::gpulab::cli::report(gpulab_cli_status_); \
  } while (0)
#define GPULAB_ASSIGN_OR_REPORT(decl, expr) \
  GPULAB_ASSIGN_OR_REPORT_IMPL(GPULAB_CONCAT(gpulab_cli_result_, __LINE__), decl, expr)
#define GPULAB_ASSIGN_OR_REPORT_IMPL(tmp, decl, expr)           \
  auto tmp = (expr);                                            \
  if (!tmp.is_ok()) return ::gpulab::cli::report(tmp.status()); \
  decl = std::move(tmp).value()

// Exit code of a run that finished but skipped some inputs (unreadable or corrupt image files),
// each named on stderr; the results of the other inputs were printed.
inline constexpr int kExitSomeInputsFailed = 9;

// Prints one line per skipped input on stderr ("gpulab: skipped '<path>': <status>") and returns
// the exit code: 0 when none was skipped, kExitSomeInputsFailed when some were, and the first
// error's own code when every one of the `total` inputs failed (nothing to show).
int report_skipped(const std::vector<InputError>& errors, size_t total);

// The command line as the process received it (for the environment block of JSON results); ""
// when /proc/self/cmdline cannot be read.
std::string process_command_line();

// Makes `sub` run `body` when it is chosen; a non-zero return ends the process with that code
// (after CLI11 has finished, so output is flushed and destructors run).
void on_run(CLI::App* sub, std::function<int()> body);

// Every subcommand's registration, called by main in the order `--help` lists them.
void add_doctor_command(CLI::App& app);
void add_classify_command(CLI::App& app);
void add_pipeline_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_build_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_accuracy_command(CLI::App& app);
void add_monitor_command(CLI::App& app);
void add_bandwidth_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_version_command(CLI::App& app);

// What `gpulab --version` prints: version, commit, and the libraries built with and found.
std::string version_text();
void add_report_command(CLI::App& app);

}  // namespace gpulab::cli
