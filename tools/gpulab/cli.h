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

}  // namespace gpulab::cli
