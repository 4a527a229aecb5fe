#include "cli.h"
namespace gpulab::cli {
void add_classify_command(CLI::App& app) { app.add_subcommand("classify", "Classify images"); }
void add_inspect_command(CLI::App& app) { app.add_subcommand("inspect", "Inspect a model"); }
}
