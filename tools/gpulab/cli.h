// Shared plumbing of the CLI's subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "gpulab/status.h"

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

// The command line as the process received it (for the environment block of JSON results); ""
// when /proc/self/cmdline cannot be read.
std::string process_command_line();

// Makes `sub` run `body` when it is chosen; a non-zero return ends the process with that code
// (after CLI11 has finished, so output is flushed and destructors run).
void on_run(CLI::App* sub, std::function<int()> body);

// Every subcommand's registration, called by main in the order `--help` lists them.
void add_doctor_command(CLI::App& app);
void add_classify_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_build_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_monitor_command(CLI::App& app);
void add_bandwidth_command(CLI::App& app);
void add_sweep_command(CLI::App& app);

}  // namespace gpulab::cli
