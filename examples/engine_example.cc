// A small program using gpulab's public engine API (include/gpulab/engine.h): build a plan from
// an ONNX classifier (or load a saved one), run a batch on the application's own CUDA stream with
// CUDA graphs, print the GPU time (CUDA events, median) and the top class of the first image.
//
//   engine_example MODEL.onnx|MODEL.plan [--precision fp16] [--batch 8] [--iterations 50]
//                  [--save OUT.plan] [--timing-cache FILE]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpulab/engine.h"

namespace {

int fail(const gpulab::Status& s) {
  std::fprintf(stderr, "engine_example: %s\n", s.to_string().c_str());
  return 1;
}

int cuda_fail(cudaError_t e, const char* what) {
  std::fprintf(stderr, "engine_example: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpulab;
  std::string model, save_path, cache;
  std::string precision_text = "fp16";
  int64_t batch = 8;
  int iterations = 50;
  bool profile = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: engine_example MODEL.onnx|MODEL.plan [--precision fp32|tf32|fp16|bf16] [--batch N]\n"
          "                      [--iterations K] [--save OUT.plan] [--timing-cache FILE] [--profile]\n");
      return 0;
    } else if (a == "--precision") {
      precision_text = next();
    } else if (a == "--batch") {
      batch = std::atoll(next().c_str());
    } else if (a == "--iterations") {
      iterations = std::atoi(next().c_str());
    } else if (a == "--save") {
      save_path = next();
    } else if (a == "--profile") {
      profile = true;
    } else if (a == "--timing-cache") {
      cache = next();
    } else {
      model = a;
    }
  }
  if (model.empty() || batch < 1 || iterations < 1) {
    std::fprintf(stderr,
                 "engine_example: give a model or plan file, --batch >= 1, --iterations >= 1 (--help)\n");
    return 2;
  }
  std::string reason;
  if (!cuda_device_available(&reason)) {
    std::fprintf(stderr, "engine_example: no usable GPU (%s)\n", reason.c_str());
    return 1;
  }
  auto precision = parse_precision(precision_text);
  if (!precision.is_ok()) return fail(precision.status());

  const bool is_plan = model.size() > 5 && model.substr(model.size() - 5) == ".plan";
  BuildOptions options{.precision = *precision, .max_batch = batch, .timing_cache_path = cache};
  const auto t0 = std::chrono::steady_clock::now();
  auto engine = is_plan ? Engine::load(model) : Engine::build_from_onnx(model, options);
  if (!engine.is_ok()) return fail(engine.status());
  std::printf("%s %s in %.2f s\n", is_plan ? "loaded" : "built", model.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (!save_path.empty())
    if (Status s = (*engine)->save(save_path); !s.is_ok()) return fail(s);
  const EngineInfo& info = (*engine)->info();
  if (batch > info.max_batch) return fail(Status::invalid_argument("--batch exceeds the plan's max batch"));

  auto context = (*engine)->create_context();
  if (!context.is_ok()) return fail(context.status());

  const int64_t in_count = batch * info.input_shape[1] * info.input_shape[2] * info.input_shape[3];
  const int64_t out_count = batch * info.num_classes;
  std::vector<float> host_in(static_cast<size_t>(in_count)), host_out(static_cast<size_t>(out_count));
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : host_in) v = dist(rng);

  cudaStream_t stream = nullptr;
  float *d_in = nullptr, *d_out = nullptr;
  if (auto e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess)
    return cuda_fail(e, "stream");
  if (auto e = cudaMalloc(reinterpret_cast<void**>(&d_in), in_count * sizeof(float)); e != cudaSuccess)
    return cuda_fail(e, "input");
  if (auto e = cudaMalloc(reinterpret_cast<void**>(&d_out), out_count * sizeof(float)); e != cudaSuccess)
    return cuda_fail(e, "output");
  cudaMemcpy(d_in, host_in.data(), in_count * sizeof(float), cudaMemcpyHostToDevice);

  const EnqueueArgs args{.input_nchw = d_in, .batch = batch, .logits = d_out, .use_cuda_graph = true};
  for (int i = 0; i < 3; ++i)  // first call captures the CUDA graph
    if (Status s = (*context)->enqueue(args, stream); !s.is_ok()) return fail(s);
  if (auto e = cudaStreamSynchronize(stream); e != cudaSuccess) return cuda_fail(e, "warm-up");

  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> times;
  for (int i = 0; i < iterations; ++i) {
    cudaEventRecord(start, stream);
    if (Status s = (*context)->enqueue(args, stream); !s.is_ok()) return fail(s);
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaMemcpy(host_out.data(), d_out, out_count * sizeof(float), cudaMemcpyDeviceToHost);
  std::sort(times.begin(), times.end());
  const double median_ms = times[times.size() / 2];
  const auto top = std::max_element(host_out.begin(), host_out.begin() + info.num_classes) - host_out.begin();
  std::printf(
      "%s on %s, %s, batch %lld: GPU time median %.4f ms (min %.4f, max %.4f) over %d runs = %.0f img/s; "
      "image 0 top-1 class %lld\n",
      model.c_str(), info.gpu_name.c_str(), std::string(precision_name(info.precision)).c_str(),
      static_cast<long long>(batch), median_ms, times.front(), times.back(), iterations,
      batch / (median_ms / 1000.0), static_cast<long long>(top));
  if (profile) {
    auto layers = (*context)->profile(batch, 20);
    if (!layers.is_ok()) return fail(layers.status());
    double total = 0;
    for (const auto& l : *layers) total += l.gpu_ms;
    std::printf("%-26s %-14s %9s %6s %9s %9s  %s\n", "layer", "kind", "ms", "share", "TFLOP/s", "GB/s",
                "tactic");
    for (size_t i = 0; i < layers->size(); ++i) {
      const LayerInfo& info_l = info.layers[i];
      const double ms = (*layers)[i].gpu_ms;
      std::printf("%-26s %-14s %9.4f %5.1f%% %9.1f %9.1f  %.60s\n", info_l.name.c_str(), info_l.kind.c_str(),
                  ms, 100.0 * ms / std::max(total, 1e-9), info_l.flops_per_image * batch / (ms * 1e9),
                  (info_l.bytes_per_image * batch + info_l.param_bytes) / (ms * 1e6), info_l.tactic.c_str());
    }
    std::printf("sum of steps (eager) %.4f ms\n", total);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(d_in);
  cudaFree(d_out);
  cudaStreamDestroy(stream);
  return 0;
}
