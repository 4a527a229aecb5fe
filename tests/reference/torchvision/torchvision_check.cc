// torchvision_check DIR MODEL [--batch N] [--no-unpassed] [--no-plan] [--threads N]: checks one model
// of a fixture folder written by tests/fixtures/make_torchvision_fixtures.py (model_check.h) and
// prints the result as one JSON object on stdout. scripts/torchvision_acceptance.py runs it per
// model. Exit code 0 when the checks ran (whatever the errors), 1 when they could not.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "core/file_io.h"
#include "model_check.h"

int main(int argc, char** argv) {
  using namespace gpulab;
  if (argc < 3) {
    std::fprintf(
        stderr, "usage: torchvision_check DIR MODEL [--batch N] [--no-unpassed] [--no-plan] [--threads N]\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  const std::string model = argv[2];
  testing::CheckOptions options;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch" && i + 1 < argc) {
      options.only_batch = std::stoll(argv[++i]);
    } else if (a == "--threads" && i + 1 < argc) {
      options.threads = std::stoi(argv[++i]);
    } else if (a == "--no-unpassed") {
      options.reference_unpassed = false;
    } else if (a == "--no-plan") {
      options.plan = false;
    } else {
      std::fprintf(stderr, "torchvision_check: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  auto text = read_file_text(dir / "manifest.json");
  if (!text.is_ok()) {
    std::fprintf(stderr, "torchvision_check: %s\n", text.status().to_string().c_str());
    return 1;
  }
  const nlohmann::json manifest = nlohmann::json::parse(*text, nullptr, false);
  if (manifest.is_discarded() || !manifest.contains("models") || !manifest["models"].contains(model) ||
      !manifest["models"][model].contains("cases")) {
    std::fprintf(stderr, "torchvision_check: %s has no exported model '%s'\n",
                 (dir / "manifest.json").c_str(), model.c_str());
    return 1;
  }
  auto check = testing::check_model(dir, model, manifest["models"][model], options);
  if (!check.is_ok()) {
    nlohmann::json j{{"model", model}, {"error", check.status().to_string()}};
    std::cout << j.dump() << "\n";
    return 1;
  }
  std::cout << testing::to_json(*check).dump() << "\n";
  return 0;
}
