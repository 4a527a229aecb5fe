#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz): small valid inputs of every kind, from
which libFuzzer mutates. Generated, never committed; scripts/fuzz.sh calls this when a target's seed
folder is missing.

Usage: make_seeds.py --out DIR        (DIR/<target>/<name>; needs numpy, PIL and onnx;
                                       torch/torchvision add a width-reduced MobileNetV2 export)

Models are a few kB: 1-8 channels, 8x8 to 32x32 pixels, so that one execution of the ONNX target
stays well under a millisecond. Plans are made from these models by the C++ tool make_plan_seeds
(the fuzz preset builds it), since only gpulab writes plan files.
"""

import argparse
import io
import json
import os
import sys

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from PIL import Image
except ImportError as e:
    print(f"make_seeds.py: cannot import {e.name}. Install python3-numpy, python3-onnx and "
          "python3-pil (scripts/install-deps.sh).", file=sys.stderr)
    sys.exit(1)

RNG = np.random.default_rng(7)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    os.replace(tmp, path)


# --- ONNX -------------------------------------------------------------------------------------

def init(name, shape, dtype=np.float32):
    if dtype == np.int64:
        return numpy_helper.from_array(np.array(shape, dtype=np.int64), name)
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.5).astype(dtype), name)


def model(nodes, inits, in_shape, out_name="y", opset=13, in_name="x", metadata=None):
    g = helper.make_graph(nodes, "seed", [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    for k, v in (metadata or {}).items():
        m.metadata_props.add(key=k, value=v)
    return m.SerializeToString()


def conv_bn_relu(prefix, x, cin, cout, k=3, stride=1, group=1, act="Relu", inits=None, nodes=None):
    inits += [init(f"{prefix}.w", [cout, cin // group, k, k]), init(f"{prefix}.b", [cout])]
    nodes.append(helper.make_node("Conv", [x, f"{prefix}.w", f"{prefix}.b"], [f"{prefix}.c"], name=f"{prefix}.conv",
                                  kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group))
    for p in ("scale", "bias", "mean"):
        inits.append(init(f"{prefix}.bn.{p}", [cout]))
    inits.append(numpy_helper.from_array(np.abs(RNG.standard_normal(cout)).astype(np.float32) + 0.5,
                                         f"{prefix}.bn.var"))
    nodes.append(helper.make_node("BatchNormalization", [f"{prefix}.c"] + [f"{prefix}.bn.{p}" for p in
                                  ("scale", "bias", "mean", "var")], [f"{prefix}.n"], name=f"{prefix}.bn"))
    if act is None:
        return f"{prefix}.n"
    if act == "Clip":
        inits += [numpy_helper.from_array(np.array(0, np.float32), f"{prefix}.lo"),
                  numpy_helper.from_array(np.array(6, np.float32), f"{prefix}.hi")]
        nodes.append(helper.make_node("Clip", [f"{prefix}.n", f"{prefix}.lo", f"{prefix}.hi"], [f"{prefix}.a"]))
    else:
        nodes.append(helper.make_node(act, [f"{prefix}.n"], [f"{prefix}.a"], name=f"{prefix}.act"))
    return f"{prefix}.a"


def head(x, c, classes, inits, nodes, softmax=False):
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], axis=1))
    inits += [init("fc.w", [classes, c]), init("fc.b", [classes])]
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits" if softmax else "y"], transB=1))
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["y"], axis=1))


def mobilenet_like():
    """Inverted residual blocks: expansion, depthwise, linear projection, residual Add; Clip(0, 6)."""
    inits, nodes = [], []
    x = conv_bn_relu("stem", "x", 3, 4, stride=2, act="Clip", inits=inits, nodes=nodes)
    e = conv_bn_relu("b1.expand", x, 4, 8, k=1, act="Clip", inits=inits, nodes=nodes)
    d = conv_bn_relu("b1.dw", e, 8, 8, group=8, act="Clip", inits=inits, nodes=nodes)
    p = conv_bn_relu("b1.project", d, 8, 4, k=1, act=None, inits=inits, nodes=nodes)
    nodes.append(helper.make_node("Add", [x, p], ["b1.out"]))
    head("b1.out", 4, 5, inits, nodes)
    return model(nodes, inits, ["N", 3, 16, 16],
                 metadata={"preprocess.preset": "torchvision", "preprocess.output_size": "16"})


def resnet_like():
    inits, nodes = [], []
    x = conv_bn_relu("stem", "x", 3, 4, k=7, stride=2, inits=inits, nodes=nodes)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
    a = conv_bn_relu("l1.a", "pool", 4, 4, inits=inits, nodes=nodes)
    b = conv_bn_relu("l1.b", a, 4, 4, act=None, inits=inits, nodes=nodes)
    nodes.append(helper.make_node("Add", [b, "pool"], ["l1.sum"]))
    nodes.append(helper.make_node("Relu", ["l1.sum"], ["l1.out"]))
    head("l1.out", 4, 3, inits, nodes, softmax=True)
    return model(nodes, inits, [1, 3, 32, 32])


def squeeze_excite():
    """MobileNetV3's pieces: HardSwish, squeeze-and-excitation (HardSigmoid, broadcast Mul)."""
    inits, nodes = [], []
    x = conv_bn_relu("stem", "x", 3, 8, stride=2, act="HardSwish", inits=inits, nodes=nodes)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["se.pool"]))
    inits += [init("se.w1", [2, 8, 1, 1]), init("se.b1", [2]), init("se.w2", [8, 2, 1, 1]), init("se.b2", [8])]
    nodes += [helper.make_node("Conv", ["se.pool", "se.w1", "se.b1"], ["se.c1"], kernel_shape=[1, 1]),
              helper.make_node("Relu", ["se.c1"], ["se.r"]),
              helper.make_node("Conv", ["se.r", "se.w2", "se.b2"], ["se.c2"], kernel_shape=[1, 1]),
              helper.make_node("HardSigmoid", ["se.c2"], ["se.s"], alpha=1 / 6, beta=0.5),
              helper.make_node("Mul", [x, "se.s"], ["se.out"]),
              helper.make_node("Sigmoid", ["se.out"], ["sig"])]
    head("sig", 8, 4, inits, nodes)
    return model(nodes, inits, ["N", 3, 16, 16], opset=14)


def fire_concat():
    """SqueezeNet's fire module (Concat of channels), MaxPool ceil_mode, a convolutional head."""
    inits, nodes = [], []
    inits += [init("sq.w", [2, 3, 1, 1]), init("e1.w", [4, 2, 1, 1]), init("e3.w", [4, 2, 3, 3]),
              init("cls.w", [3, 8, 1, 1])]
    nodes += [helper.make_node("Conv", ["x", "sq.w"], ["sq"], kernel_shape=[1, 1]),
              helper.make_node("Relu", ["sq"], ["sqr"]),
              helper.make_node("Conv", ["sqr", "e1.w"], ["e1"], kernel_shape=[1, 1]),
              helper.make_node("Conv", ["sqr", "e3.w"], ["e3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
              helper.make_node("Concat", ["e1", "e3"], ["cat"], axis=1),
              helper.make_node("MaxPool", ["cat"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
              helper.make_node("Conv", ["mp", "cls.w"], ["cls"], kernel_shape=[1, 1]),
              helper.make_node("GlobalAveragePool", ["cls"], ["g"]),
              helper.make_node("Flatten", ["g"], ["y"])]
    return model(nodes, inits, [1, 3, 9, 9])


def shape_chain():
    """A Reshape whose target is computed: Shape -> Gather -> Unsqueeze -> Concat; Dropout, Identity."""
    inits, nodes = [], []
    inits += [init("w", [2, 3, 3, 3]), numpy_helper.from_array(np.array(0, np.int64), "zero"),
              numpy_helper.from_array(np.array([0], np.int64), "axes0"),
              numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
              init("mm", [18, 4]), init("mb", [4])]
    nodes += [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], strides=[2, 2]),
              helper.make_node("Dropout", ["c"], ["d"]),
              helper.make_node("Identity", ["d"], ["i"]),
              helper.make_node("Shape", ["i"], ["s"]),
              helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
              helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
              helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
              helper.make_node("Reshape", ["i", "target"], ["r"]),
              helper.make_node("MatMul", ["r", "mm"], ["m"]),
              helper.make_node("Add", ["m", "mb"], ["y"])]
    return model(nodes, inits, ["N", 3, 7, 7])


def pads_and_pools():
    """Pad folded into AveragePool and Conv, ReduceMean as GlobalAveragePool, auto_pad SAME_UPPER."""
    inits, nodes = [], []
    inits += [numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
              init("w", [4, 3, 3, 3]), init("w2", [4, 4, 3, 3])]
    nodes += [helper.make_node("Pad", ["x", "pads"], ["p"], mode="constant"),
              helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[3, 3], strides=[1, 1],
                               count_include_pad=1),
              helper.make_node("Conv", ["a", "w"], ["c"], kernel_shape=[3, 3], strides=[2, 2],
                               auto_pad="SAME_UPPER"),
              helper.make_node("Conv", ["c", "w2"], ["c2"], kernel_shape=[3, 3], dilations=[2, 2],
                               auto_pad="SAME_LOWER"),
              helper.make_node("ReduceMean", ["c2"], ["y"], axes=[2, 3], keepdims=0)]
    return model(nodes, inits, [1, 3, 10, 10])


def odd_tensors():
    """Initializers in every stored type: float16, int32 (as int32_data), double, Constant nodes."""
    w16 = numpy_helper.from_array(RNG.standard_normal([2, 1, 1, 1]).astype(np.float16), "w")
    b = helper.make_tensor("b", TensorProto.DOUBLE, [2], [0.5, -0.5])
    shape = helper.make_tensor("shape32", TensorProto.INT32, [2], [1, -1])
    nodes = [helper.make_node("Constant", [], ["k"], value=helper.make_tensor("kv", TensorProto.FLOAT, [1], [2.0])),
             helper.make_node("Constant", [], ["kf"], value_float=0.25),
             helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("Mul", ["c", "k"], ["m"]),
             helper.make_node("Add", ["m", "kf"], ["a"]),
             helper.make_node("Reshape", ["a", "shape32"], ["y"])]
    return model(nodes, [w16, b, shape], [1, 1, 2, 2], opset=11)


def unsqueeze_opset11():
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Unsqueeze", ["r"], ["u"], axes=[0]),
             helper.make_node("Flatten", ["u"], ["y"], axis=2)]
    return model(nodes, [], [2, 3], opset=11)


EXTREMES = [-(1 << 63), -(1 << 31), -2, -1, 0, 1 << 31, 1 << 32, 1 << 62, (1 << 63) - 1]


def extreme_variants(data):
    """Copies of a model with one integer (an int attribute element, an input dimension, an int64
    initializer element) set to an extreme value each: the edits that reach the arithmetic of shape
    inference, the passes and lowering, which random byte flips rarely make."""
    base = onnx.load_from_string(data)
    variants = []
    for ni, node in enumerate(base.graph.node):
        for ai, attr in enumerate(node.attribute):
            count = 1 if attr.type == onnx.AttributeProto.INT else len(attr.ints)
            if attr.type not in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS):
                continue
            for k in range(count):
                for v in EXTREMES:
                    m = onnx.ModelProto()
                    m.CopyFrom(base)
                    a = m.graph.node[ni].attribute[ai]
                    if a.type == onnx.AttributeProto.INT:
                        a.i = v
                    else:
                        a.ints[k] = v
                    variants.append((f"{node.op_type}{ni}.{attr.name}{k}={v}", m))
    for ii, inp in enumerate(base.graph.input):
        for di, dim in enumerate(inp.type.tensor_type.shape.dim):
            for v in EXTREMES:
                m = onnx.ModelProto()
                m.CopyFrom(base)
                m.graph.input[ii].type.tensor_type.shape.dim[di].dim_value = v
                variants.append((f"input{ii}.dim{di}={v}", m))
    for ti, t in enumerate(base.graph.initializer):
        if t.data_type != TensorProto.INT64:
            continue
        values = numpy_helper.to_array(t)
        for k in range(values.size):
            for v in EXTREMES:
                m = onnx.ModelProto()
                m.CopyFrom(base)
                changed = values.copy().reshape(-1)
                changed[k] = v
                m.graph.initializer[ti].CopyFrom(numpy_helper.from_array(changed.reshape(values.shape), t.name))
                variants.append((f"init.{t.name}{k}={v}", m))
    return [(name, m.SerializeToString()) for name, m in variants]


def torchvision_mobilenet_v2(out):
    try:
        import torch
        import torchvision
    except ImportError:
        print("make_seeds.py: no torch/torchvision; skipping the MobileNetV2 export seed", file=sys.stderr)
        return
    torch.manual_seed(0)
    m = torchvision.models.mobilenet_v2(width_mult=0.1, num_classes=4)
    # The last 1x1 convolution keeps 1280 channels at any width; 16 keep the file at a few kB.
    last = m.features[-1]
    last[0] = torch.nn.Conv2d(last[0].in_channels, 16, 1, bias=False)
    last[1] = torch.nn.BatchNorm2d(16)
    m.classifier[1] = torch.nn.Linear(16, 4)
    m.eval()
    buf = io.BytesIO()
    torch.onnx.export(m, torch.randn(1, 3, 32, 32), buf, opset_version=13, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
    write(os.path.join(out, "onnx_import", "torchvision_mobilenet_v2_w0.1.onnx"), buf.getvalue())


# --- images -----------------------------------------------------------------------------------

def images(out):
    rgb = Image.fromarray(RNG.integers(0, 256, (12, 16, 3), dtype=np.uint8), "RGB")
    gray = rgb.convert("L")
    seeds = {}

    def save(name, im, fmt, **kw):
        b = io.BytesIO()
        im.save(b, fmt, **kw)
        seeds[name] = b.getvalue()

    save("baseline.jpg", rgb, "JPEG", quality=80)
    save("progressive.jpg", rgb, "JPEG", quality=60, progressive=True)
    save("gray.jpg", gray, "JPEG")
    save("cmyk.jpg", rgb.convert("CMYK"), "JPEG")
    save("444.jpg", rgb, "JPEG", subsampling=0)
    save("rgb.png", rgb, "PNG")
    save("interlaced.png", rgb, "PNG", interlace=1)
    save("rgba.png", rgb.convert("RGBA"), "PNG")
    save("gray.png", gray, "PNG")
    save("la.png", gray.convert("LA"), "PNG")
    save("palette.png", rgb.convert("P"), "PNG")
    save("bilevel.png", gray.convert("1"), "PNG")
    save("gray16.png", Image.fromarray((np.asarray(gray).astype(np.uint16) * 257), "I;16"), "PNG")
    save("rgb24.bmp", rgb, "BMP")
    save("palette8.bmp", rgb.convert("P"), "BMP")
    save("rgb.ppm", rgb, "PPM")
    save("gray.pgm", gray, "PPM")
    # A 32-bit BI_BITFIELDS BMP and a top-down 24-bit one, written by hand (PIL writes neither).
    w, h = 4, 3
    px = RNG.integers(0, 256, (h, w, 4), dtype=np.uint8).tobytes()
    info = (40 + 12).to_bytes(4, "little")
    header = (b"BM" + (14 + 52 + len(px)).to_bytes(4, "little") + b"\0\0\0\0" + (14 + 52).to_bytes(4, "little") +
              (40).to_bytes(4, "little") + w.to_bytes(4, "little") + h.to_bytes(4, "little", signed=True) +
              (1).to_bytes(2, "little") + (32).to_bytes(2, "little") + (3).to_bytes(4, "little") +
              len(px).to_bytes(4, "little") + bytes(16) +
              (0x00FF0000).to_bytes(4, "little") + (0x0000FF00).to_bytes(4, "little") +
              (0x000000FF).to_bytes(4, "little"))
    del info
    seeds["bitfields32.bmp"] = header + px
    stride = (w * 3 + 3) // 4 * 4
    px24 = bytes(stride * h)
    seeds["topdown24.bmp"] = (b"BM" + (54 + len(px24)).to_bytes(4, "little") + b"\0\0\0\0" + (54).to_bytes(4, "little") +
                              (40).to_bytes(4, "little") + w.to_bytes(4, "little") +
                              (-h).to_bytes(4, "little", signed=True) + (1).to_bytes(2, "little") +
                              (24).to_bytes(2, "little") + bytes(24) + px24)
    kinds = {"jpeg": (".jpg",), "png": (".png",), "bmp": (".bmp",), "ppm": (".ppm", ".pgm")}
    for name, data in seeds.items():
        write(os.path.join(out, "image", name), data)
        for target, exts in kinds.items():
            if name.endswith(exts):
                write(os.path.join(out, target, name), data)


# --- text formats -----------------------------------------------------------------------------

def text_seeds(out):
    cache = {"format": 1, "entries": {
        "conv:n1:c64:h56:w56:k64:r3:s3:fp16@NVIDIA H200|sm_90|cuda13000|cudnn91900|cublaslt130100":
            {"tactic": "cudnn:engine=7:knobs=1,2", "time_ms": 0.0123},
        "gemm:m1:n1000:k1280:fp32@NVIDIA H100|sm_90|cuda12040|cudnn90100|cublaslt120400":
            {"tactic": "cublaslt:algo=21", "time_ms": 1.5e-3}}}
    write(os.path.join(out, "timing_cache", "two_entries.json"), json.dumps(cache, indent=1))
    write(os.path.join(out, "timing_cache", "empty.json"), json.dumps({"format": 1, "entries": {}}))
    # What save_calibration_cache writes (gpulab build --precision int8 --calibration-cache F).
    calibration = {"schema": "gpulab.calibration", "schema_version": 1, "model": "resnet18.onnx",
                   "model_fnv1a64": "0123456789abcdef", "calibrator": "percentile", "percentile": 99.99,
                   "images": 256, "tensors": {
                       "input": {"amax": 2.64, "int8_scale": 0.0207874, "fp8_scale": 0.00589286},
                       "/layer1/relu": {"amax": 0.0, "int8_scale": 1.0, "fp8_scale": 1.0}}}
    write(os.path.join(out, "calibration_cache", "two_tensors.json"), json.dumps(calibration, indent=1))
    calibration["calibrator"] = "entropy"
    calibration["tensors"] = {}
    write(os.path.join(out, "calibration_cache", "no_tensors.json"), json.dumps(calibration))
    write(os.path.join(out, "labels", "three.txt"), "tench, Tinca tinca\r\ngoldfish\n\n  great white shark \n")
    write(os.path.join(out, "labels", "one.txt"), "background")
    write(os.path.join(out, "labels_tsv", "labels.tsv"),
          "file\tindex\twnid\nimages/a.jpg\t0\tn01440764\r\nimages/b.png\t999\tn15075141\nc.bmp\t5\n")
    requests = {
        "get_metrics": "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9400\r\nUser-Agent: Prometheus/2.45\r\n"
                       "Accept: text/plain;version=0.0.4\r\nAccept-Encoding: gzip\r\n\r\n",
        "get_root": "GET / HTTP/1.0\r\n\r\n",
        "head": "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "post": "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                "Content-Length: 7\r\n\r\na=1&b=2",
        "chunked": "PUT /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n0\r\n\r\n",
        "range": "GET /metrics?x=%20y&z HTTP/1.1\r\nRange: bytes=0-10,20-\r\nExpect: 100-continue\r\n\r\n",
        "multipart": "POST / HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 44\r\n\r\n"
                     "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--b--\r\n",
    }
    for name, text in requests.items():
        write(os.path.join(out, "metrics_request", name), text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    onnx_seeds = {"mobilenet_like": mobilenet_like(), "resnet_like": resnet_like(),
                  "squeeze_excite": squeeze_excite(), "fire_concat": fire_concat(), "shape_chain": shape_chain(),
                  "pads_and_pools": pads_and_pools(), "odd_tensors": odd_tensors(),
                  "unsqueeze_opset11": unsqueeze_opset11()}
    for name, data in onnx_seeds.items():
        write(os.path.join(out, "onnx_import", name + ".onnx"), data)
        for i, (what, variant) in enumerate(extreme_variants(data)):
            write(os.path.join(out, "onnx_import", f"{name}.extreme{i:03d}.onnx"), variant)
    torchvision_mobilenet_v2(out)
    images(out)
    text_seeds(out)
    print(f"make_seeds.py: seeds in {out}")


if __name__ == "__main__":
    main()
