// gpulab inspect: the graph of an ONNX model before and after the passes, with per-node output
// shape, parameter count, FLOPs and bytes at a chosen batch size, and totals; and whether the GPU
// engine can build a plan for it (lowering is CPU work: the answer needs no GPU).
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli.h"

#if defined(GPULAB_HAVE_ONNX) && defined(GPULAB_HAVE_PASSES)
#include "graph/cost.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#if defined(GPULAB_HAVE_PLAN)
#include "plan/lower.h"
#endif

namespace gpulab::cli {
namespace {

struct InspectOptions {
  std::string model;
  bool json = false;
  bool no_passes = false;
  int64_t batch = 1;
};

// "Conv", or "Conv+residual+relu" for a Conv with a fused epilogue.
std::string op_label(const Node& node) {
  std::string s(op_name(node.op));
  if (node.op == OpType::kConv) {
    const ConvAttrs& a = node.attr<ConvAttrs>();
    if (a.has_residual) s += "+residual";
    if (a.activation != Activation::kNone) s += "+" + std::string(activation_name(a.activation));
  }
  return s;
}

// Elements of the float initializers a node reads (weights and biases, not shape tensors).
int64_t param_count(const Graph& graph, const Node& node) {
  int64_t n = 0;
  for (const std::string& in : node.inputs) {
    const Tensor* t = graph.initializer(in);
    if (t && t->dtype() == DataType::kFloat32) n += t->numel();
  }
  return n;
}

std::string output_shape(const Graph& graph, const Node& node) {
  const ValueInfo* v = node.outputs.empty() ? nullptr : graph.value(node.outputs[0]);
  return v ? v->shape.to_string() : "?";
}

nlohmann::json graph_json(const Graph& graph, int64_t batch) {
  nlohmann::json nodes = nlohmann::json::array();
  int64_t params = 0;
  for (const Node& node : graph.nodes) {
    const NodeCost c = node_cost(graph, node, batch);
    const int64_t p = param_count(graph, node);
    params += p;
    nodes.push_back({{"name", node.name},
                     {"op", op_label(node)},
                     {"output_shape", output_shape(graph, node)},
                     {"params", p},
                     {"flops", c.flops},
                     {"bytes", c.bytes()}});
  }
  const NodeCost total = graph_cost(graph, batch);
  return {{"node_count", graph.nodes.size()},
          {"nodes", std::move(nodes)},
          {"totals",
           {{"params", params},
            {"flops", total.flops},
            {"gflop", total.flops / 1e9},
            {"bytes", total.bytes()},
            {"mb", static_cast<double>(total.bytes()) / 1e6}}}};
}

void print_graph(const std::string& title, const Graph& graph, int64_t batch) {
  size_t name_width = 4;
  for (const Node& node : graph.nodes) name_width = std::max(name_width, node.name.size());
  name_width = std::min<size_t>(name_width, 64);
  fmt::print("\n== {} ({} nodes; FLOPs and bytes at batch {}) ==\n", title, graph.nodes.size(), batch);
  fmt::print("{:>4}  {:<{}}  {:<22}  {:<18}  {:>10}  {:>10}  {:>9}\n", "#", "name", name_width, "op",
             "output shape", "params", "MFLOP", "MB");
  int64_t params = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    const NodeCost c = node_cost(graph, node, batch);
    const int64_t p = param_count(graph, node);
    params += p;
    std::string name = node.name;
    if (name.size() > name_width) name = "..." + name.substr(name.size() - (name_width - 3));
    fmt::print("{:>4}  {:<{}}  {:<22}  {:<18}  {:>10}  {:>10.3f}  {:>9.3f}\n", i, name, name_width,
               op_label(node), output_shape(graph, node), p, c.flops / 1e6,
               static_cast<double>(c.bytes()) / 1e6);
  }
  const NodeCost total = graph_cost(graph, batch);
  fmt::print("total: {} params, {:.3f} GFLOP, {:.2f} MB moved\n", params, total.flops / 1e9,
             static_cast<double>(total.bytes()) / 1e6);
}

nlohmann::json values_json(const Graph& graph, const std::vector<std::string>& names) {
  nlohmann::json list = nlohmann::json::array();
  for (const std::string& n : names) {
    const ValueInfo* v = graph.value(n);
    list.push_back({{"name", n},
                    {"shape", v ? v->shape.to_string() : "?"},
                    {"dtype", v ? std::string(dtype_name(v->dtype)) : "?"}});
  }
  return list;
}

// Whether lower_graph takes the optimized graph: an FP32 plan's steps by kind, or why not. The
// plan format is the same for every precision; FP32 lowers the graph as it is.
struct GpuVerdict {
  bool known = false;  // false in a build without the plan library
  bool supported = false;
  std::string reason;
  std::map<std::string, int> steps;  // kind name -> count
};

GpuVerdict gpu_verdict([[maybe_unused]] const Graph& optimized) {
  GpuVerdict v;
#if defined(GPULAB_HAVE_PLAN)
  v.known = true;
  BuildOptions options;
  options.precision = Precision::kFp32;
  options.max_batch = 1;
  auto plan = lower_graph(optimized, options);
  v.supported = plan.is_ok();
  if (!plan.is_ok()) {
    v.reason = plan.status().message();
    return v;
  }
  for (const PlanStep& s : plan->steps) ++v.steps[std::string(step_kind_name(s.kind))];
#endif
  return v;
}

int run_inspect(const InspectOptions& opt) {
  if (opt.batch < 1) {
    return report(Status::invalid_argument("inspect: --batch " + std::to_string(opt.batch) +
                                           " is not a batch size. Use 1 or more."));
  }
  auto loaded = load_onnx(opt.model);
  if (!loaded.is_ok()) return report(loaded.status());
  const Graph& imported = loaded.value();
  Graph optimized = imported;
  if (!opt.no_passes) {
    Status s = run_passes(optimized);
    if (!s.is_ok()) return report(s.with_context("inspect '" + opt.model + "'"));
  }

  if (opt.json) {
    nlohmann::json j = {{"model", opt.model},
                        {"graph_name", imported.name},
                        {"opset", imported.opset},
                        {"batch", opt.batch},
                        {"inputs", values_json(imported, imported.inputs)},
                        {"outputs", values_json(imported, imported.outputs)},
                        {"metadata", imported.metadata},
                        {"imported", graph_json(imported, opt.batch)}};
    if (!opt.no_passes) {
      j["optimized"] = graph_json(optimized, opt.batch);
      if (const GpuVerdict v = gpu_verdict(optimized); v.known) {
        j["gpu_engine"] = {{"supported", v.supported}};
        if (v.supported) j["gpu_engine"]["steps"] = v.steps;
        if (!v.supported) j["gpu_engine"]["reason"] = v.reason;
      }
    }
    fmt::print("{}\n", j.dump(1));
    return 0;
  }
  fmt::print("model: {} (graph '{}', opset {})\n", opt.model, imported.name, imported.opset);
  for (const std::string& n : imported.inputs) {
    const ValueInfo* v = imported.value(n);
    fmt::print("input:  {} {} {}\n", n, v->shape.to_string(), dtype_name(v->dtype));
  }
  for (const std::string& n : imported.outputs) {
    const ValueInfo* v = imported.value(n);
    fmt::print("output: {} {} {}\n", n, v ? v->shape.to_string() : "?", v ? dtype_name(v->dtype) : "?");
  }
  print_graph("as imported", imported, opt.batch);
  if (!opt.no_passes) {
    print_graph("after passes", optimized, opt.batch);
    if (const GpuVerdict v = gpu_verdict(optimized); v.known && v.supported) {
      std::string kinds;
      for (const auto& [kind, count] : v.steps)
        kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", count, kind);
      fmt::print("\nGPU engine: supported ({})\n", kinds);
    } else if (v.known) {
      fmt::print("\nGPU engine: not supported: {}\n", v.reason);
    }
  }
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto opt = std::make_shared<InspectOptions>();
  CLI::App* sub = app.add_subcommand(
      "inspect",
      "Show a model's graph before and after the passes, with shapes, parameters, FLOPs and bytes");
  sub->add_option("model", opt->model, "ONNX model file")->required();
  sub->add_flag("--json", opt->json, "Print JSON instead of tables");
  sub->add_flag("--no-passes", opt->no_passes, "Show only the graph as imported");
  sub->add_option("--batch", opt->batch, "Batch size for FLOPs and bytes (default 1)");
  on_run(sub, [opt] { return run_inspect(*opt); });
}

}  // namespace gpulab::cli

#else  // built without the onnx or passes library

namespace gpulab::cli {
void add_inspect_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("inspect", "Inspect a model (unavailable in this build)");
  on_run(sub, [] {
    return report(
        Status::unavailable("inspect: this gpulab was built without the onnx and passes libraries."));
  });
}
}  // namespace gpulab::cli

#endif
