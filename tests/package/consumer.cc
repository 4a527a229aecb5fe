// gpulab_consumer MODEL.onnx [--json FILE]: loads an image classifier through gpulab's public API
// (installed headers, gpulab::engine) and runs it on one uniform mid-grey image, [1, C, H, W] of
// zeros: what a grey picture becomes after the bundled model's TF-Slim normalisation
// ((pixel - 128) / 128). Prints the top 5 classes of gpulab::ReferenceModel (CPU); where a GPU is
// usable (a CUDA build on a GPU machine) also builds the engine (FP32) and prints its top 5 and
// the largest difference from the reference. --json writes the same as JSON, for
// scripts/package.sh to compare with `gpulab classify` on a grey image.
// Exit codes: 0 ok, 1 a gpulab call failed or the engine disagreed with the reference, 2 usage.
#include <gpulab/engine.h>
#include <gpulab/reference_model.h>
#include <gpulab/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

namespace {

std::vector<int64_t> top5(const gpulab::Tensor& scores) {
  const auto v = scores.f32();
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = std::min<size_t>(5, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int64_t a, int64_t b) { return v[a] > v[b]; });
  order.resize(k);
  return order;
}

std::string top_json(const gpulab::Tensor& scores) {
  std::string out = "[";
  for (int64_t i : top5(scores)) {
    char item[96];
    std::snprintf(item, sizeof item, "%s{\"index\": %lld, \"score\": %.6f}", out.size() > 1 ? ", " : "",
                  static_cast<long long>(i), scores.f32()[i]);
    out += item;
  }
  return out + "]";
}

void print_top(const char* who, const gpulab::Tensor& scores) {
  std::printf("%s top 5:", who);
  for (int64_t i : top5(scores)) std::printf("  %lld (%.4f)", static_cast<long long>(i), scores.f32()[i]);
  std::printf("\n");
}

int fail(const gpulab::Status& status) {
  std::fprintf(stderr, "gpulab_consumer: %s\n", status.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (model_path.empty() && arg.rfind("--", 0) != 0) {
      model_path = arg;
    } else {
      std::fprintf(stderr, "usage: gpulab_consumer MODEL.onnx [--json FILE]\n");
      return 2;
    }
  }
  if (model_path.empty()) {
    std::fprintf(stderr, "usage: gpulab_consumer MODEL.onnx [--json FILE]\n");
    return 2;
  }
  std::printf("gpulab %s (installed package)\n", GPULAB_VERSION);

  auto model = gpulab::ReferenceModel::load_onnx(model_path);
  if (!model.is_ok()) return fail(model.status());
  const gpulab::Shape image_shape = model->input_shape().bind_batch(1);
  std::printf("%s: input %s, %lld classes, %s\n", model_path.c_str(),
              model->input_shape().to_string().c_str(), static_cast<long long>(model->num_classes()),
              model->outputs_probabilities() ? "probabilities" : "logits");
  const gpulab::Tensor grey(gpulab::DataType::kFloat32, image_shape);  // zero-filled
  auto reference = model->run(grey);
  if (!reference.is_ok()) return fail(reference.status());
  print_top("reference (CPU)", *reference);

  std::string engine_json = "null";
  std::string why_not;
  if (gpulab::cuda_device_available(&why_not)) {
    gpulab::BuildOptions options;
    options.precision = gpulab::Precision::kFp32;
    options.max_batch = 1;
    options.time_tactics = false;  // cuDNN's first choice: a quick build
    auto engine = gpulab::Engine::build_from_onnx(model_path, options);
    if (!engine.is_ok()) return fail(engine.status());
    auto context = (*engine)->create_context();
    if (!context.is_ok()) return fail(context.status());
    auto gpu = (*context)->run(grey);
    if (!gpu.is_ok()) return fail(gpu.status());
    print_top(("engine (" + (*engine)->info().gpu_name + ", fp32)").c_str(), *gpu);
    double max_abs = 0;
    for (size_t i = 0; i < gpu->f32().size(); ++i)
      max_abs = std::max(max_abs, double(std::fabs(gpu->f32()[i] - reference->f32()[i])));
    std::printf("engine vs reference: max |difference| %.3g\n", max_abs);
    engine_json =
        "{\"top\": " + top_json(*gpu) + ", \"max_abs_difference\": " + std::to_string(max_abs) + "}";
    if (top5(*gpu)[0] != top5(*reference)[0]) {
      std::fprintf(stderr, "gpulab_consumer: the engine's top class differs from the reference's\n");
      return 1;
    }
  } else {
    std::printf("GPU engine: not run (%s)\n", why_not.c_str());
  }

  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "{\"gpulab_version\": \"" << GPULAB_VERSION << "\", \"num_classes\": " << model->num_classes()
        << ", \"reference\": {\"top\": " << top_json(*reference) << "}, \"engine\": " << engine_json << "}\n";
    if (!out) {
      std::fprintf(stderr, "gpulab_consumer: cannot write '%s'\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
