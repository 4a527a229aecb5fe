#include "cli.h"
namespace gpulab::cli {
void add_classify_command(CLI::App& app) {
  app.add_subcommand("classify", "Classify images");
}
}  // namespace gpulab::cli
