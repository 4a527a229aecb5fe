#!/usr/bin/env python3
"""Writes a tiny ONNX "classifier" for measuring the input pipeline, not a model.

Usage: make_tiny_classifier.py --out tiny.onnx [--size 224] [--classes 1000]

input [N,3,S,S] -> GlobalAveragePool -> Flatten -> Gemm (seeded random weights) -> logits
[N,classes], with torchvision preprocessing metadata. The reference backend runs it in well under
a millisecond per image, so `gpulab pipeline --device cpu --model tiny.onnx` measures the
pipeline's own stages (reading, decoding, preprocessing, staging) and its memory over many passes.
"""
import argparse
import sys

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    sys.exit(f"make_tiny_classifier.py: {e}. Use a python3 with numpy and onnx (Debian: /usr/bin/python3).")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 1, (a.classes, 3)).astype(np.float32), "fc.w")
    b = numpy_helper.from_array(rng.normal(0, 1, (a.classes,)).astype(np.float32), "fc.b")
    nodes = [helper.make_node("GlobalAveragePool", ["input"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                            ["N", 3, a.size, a.size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", a.classes])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    for k, v in {"preprocess.resize": f"resize_256_then_center_crop_{a.size}",
                 "preprocess.mean": "0.485,0.456,0.406", "preprocess.std": "0.229,0.224,0.225",
                 "preprocess.pixel_range": "0-1"}.items():
        model.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(model)
    onnx.save(model, a.out)
    print(f"make_tiny_classifier.py: wrote {a.out}")


if __name__ == "__main__":
    main()
