#include "cli.h"
namespace gpulab::cli {
void add_inspect_command(CLI::App& app) {
  app.add_subcommand("inspect", "Inspect a model");
}
}  // namespace gpulab::cli
