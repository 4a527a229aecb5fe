// A small residual network in the form run_passes leaves (fused conv epilogues), for the INT8/FP8
// tests of the plan and the quant library: every step kind an 8-bit plan has, at 8x8 pixels.
#pragma once

#include <gtest/gtest.h>

#include "graph/graph.h"
#include "normal_tensor.h"

namespace gpulab::testing {

// input [N,3,8,8] -> conv1 3x3 (8) relu = a -> conv2 depthwise 3x3 clip(0,6) = b
//   -> conv3 1x1 (8) + residual a = c -> maxpool 2x2 = d -> GAP = e -> flatten = f -> fc (10) = logits
inline Graph residual_net() {
  Graph g;
  g.name = "residual";
  g.inputs = {"input"};
  g.values["input"] = ValueInfo{DataType::kFloat32, Shape{Shape::kBatch, 3, 8, 8}, std::nullopt};
  g.initializers["w1"] = normal_tensor(Shape{8, 3, 3, 3}, 1, 0.4f);
  g.initializers["b1"] = normal_tensor(Shape{8}, 2, 0.1f);
  g.initializers["w2"] = normal_tensor(Shape{8, 1, 3, 3}, 3, 0.5f);
  g.initializers["b2"] = normal_tensor(Shape{8}, 4, 0.1f);
  g.initializers["w3"] = normal_tensor(Shape{8, 8, 1, 1}, 5, 0.4f);
  g.initializers["fc.w"] = normal_tensor(Shape{10, 8}, 6, 0.5f);
  g.initializers["fc.b"] = normal_tensor(Shape{10}, 7, 0.1f);
  ConvAttrs c1;
  c1.kernel = {3, 3};
  c1.pads = {1, 1, 1, 1};
  c1.activation = Activation::kRelu;
  ConvAttrs c2 = c1;
  c2.groups = 8;
  c2.activation = Activation::kClip;
  c2.clip_min = 0;
  c2.clip_max = 6;
  ConvAttrs c3;
  c3.kernel = {1, 1};
  c3.has_residual = true;
  PoolAttrs pool;
  pool.kernel = {2, 2};
  pool.stride = {2, 2};
  GemmAttrs fc;
  fc.trans_b = true;
  g.nodes = {Node{"conv1", OpType::kConv, {"input", "w1", "b1"}, {"a"}, c1},
             Node{"conv2", OpType::kConv, {"a", "w2", "b2"}, {"b"}, c2},
             Node{"conv3", OpType::kConv, {"b", "w3", "", "a"}, {"c"}, c3},
             Node{"pool", OpType::kMaxPool, {"c"}, {"d"}, pool},
             Node{"gap", OpType::kGlobalAveragePool, {"d"}, {"e"}, {}},
             Node{"flat", OpType::kFlatten, {"e"}, {"f"}, FlattenAttrs{1}},
             Node{"fc", OpType::kGemm, {"f", "fc.w", "fc.b"}, {"logits"}, fc}};
  g.outputs = {"logits"};
  EXPECT_TRUE(g.infer_shapes().is_ok());
  return g;
}

}  // namespace gpulab::testing
