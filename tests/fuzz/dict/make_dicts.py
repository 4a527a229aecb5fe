#!/usr/bin/env python3
"""Writes the libFuzzer dictionaries in this folder (checked in; rerun after editing): names and
byte strings that a mutation would rarely guess, from the formats' specifications and the names
gpulab's readers look for. Usage: python3 make_dicts.py (writes beside itself)."""
import os


def varint(v):
    enc = []
    while True:
        b = v & 0x7f
        v >>= 7
        enc.append(b | (0x80 if v else 0))
        if not v:
            return "".join(f"\\x{b:02x}" for b in enc)


def write(name, lines):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name), "w") as f:
        f.write("\n".join(lines) + "\n")


ops = ["Conv", "BatchNormalization", "Relu", "Clip", "Add", "Mul", "MaxPool", "AveragePool", "GlobalAveragePool",
       "Flatten", "Reshape", "Gemm", "MatMul", "Identity", "Dropout", "Constant", "Shape", "Gather", "Unsqueeze",
       "Concat", "Softmax", "Sigmoid", "HardSigmoid", "HardSwish", "Pad", "ReduceMean"]
attrs = ["kernel_shape", "strides", "pads", "dilations", "group", "auto_pad", "SAME_UPPER", "SAME_LOWER", "VALID",
         "NOTSET", "ceil_mode", "count_include_pad", "storage_order", "epsilon", "momentum", "axis", "axes",
         "keepdims", "alpha", "beta", "transA", "transB", "allowzero", "value", "value_float", "value_ints",
         "value_int", "value_floats", "mode", "constant", "start", "end", "ratio", "seed", "training_mode",
         "noop_with_empty_axes", "min", "max", "location", "offset", "length", "ai.onnx", "preprocess.preset",
         "preprocess.output_size", "preprocess.resize_shorter", "preprocess.mean", "preprocess.std",
         "preprocess.central_fraction", "torchvision", "tf-slim"]
# Protobuf keys ((field number << 3) | wire type: 0 varint, 2 length-delimited, 5 fixed32) of the
# onnx.proto fields the importer reads.
keys = {"graph": (7, 2), "opset_import": (8, 2), "ir_version": (1, 0), "node": (1, 2), "initializer": (5, 2),
        "input": (11, 2), "output": (12, 2), "attribute": (5, 2), "op_type": (4, 2), "domain": (7, 2),
        "dims": (1, 0), "data_type": (2, 0), "float_data": (4, 2), "int32_data": (5, 2), "int64_data": (7, 2),
        "raw_data": (9, 2), "double_data": (10, 2), "external_data": (13, 2), "data_location": (14, 0),
        "attr_i": (3, 0), "attr_f": (2, 5), "attr_t": (5, 2), "attr_ints": (8, 2), "attr_floats": (7, 2),
        "attr_type": (20, 0), "attr_g": (6, 2), "dim_value": (1, 0), "dim_param": (2, 2),
        "metadata_props": (14, 2), "version": (2, 0)}
extremes = {"minus1": (1 << 64) - 1, "int64max": (1 << 63) - 1, "int32over": 1 << 31, "uint32over": 1 << 32}
write("onnx_import.dict", ["# ONNX op and attribute names, protobuf field keys, extreme varints (make_dicts.py)"] +
      [f'"{w}"' for w in ops + attrs] +
      [f'{name}="{varint((f << 3) | w)}"' for name, (f, w) in keys.items()] +
      [f'varint_{name}="{varint(v)}"' for name, v in extremes.items()])

markers = {"SOI": 0xD8, "EOI": 0xD9, "SOS": 0xDA, "DQT": 0xDB, "DNL": 0xDC, "DRI": 0xDD, "DHT": 0xC4,
           "SOF0": 0xC0, "SOF1": 0xC1, "SOF2": 0xC2, "SOF3": 0xC3, "SOF9": 0xC9, "DAC": 0xCC, "APP0": 0xE0,
           "APP1": 0xE1, "APP2": 0xE2, "APP14": 0xEE, "COM": 0xFE, "RST0": 0xD0, "RST7": 0xD7}
write("jpeg.dict", ["# JPEG markers (ITU T.81 table B.1) and segment identifiers (make_dicts.py)"] +
      [f'{n}="\\xff\\x{m:02x}"' for n, m in markers.items()] +
      ['JFIF="JFIF\\x00"', 'Adobe="Adobe"', 'Exif="Exif\\x00\\x00"', 'ICC="ICC_PROFILE\\x00"', 'big_dim="\\xff\\xff"',
       'stuffed="\\xff\\x00"'])

chunks = ["IHDR", "PLTE", "IDAT", "IEND", "tRNS", "gAMA", "cHRM", "sRGB", "iCCP", "tEXt", "zTXt", "iTXt", "bKGD",
          "pHYs", "sBIT", "sPLT", "hIST", "tIME", "eXIf", "acTL", "fcTL", "fdAT"]
write("png.dict", ["# PNG signature and chunk types (PNG specification 5.2, 11) (make_dicts.py)",
                   'signature="\\x89PNG\\x0d\\x0a\\x1a\\x0a"'] + [f'"{c}"' for c in chunks] +
      ['ihdr_len="\\x00\\x00\\x00\\x0d"', 'big_dim="\\x7f\\xff\\xff\\xff"', 'zlib="\\x78\\x9c"'])

write("bmp.dict", ["# BMP header fields (BITMAPFILEHEADER, BITMAPINFOHEADER) (make_dicts.py)", '"BM"',
                   'info40="\\x28\\x00\\x00\\x00"', 'info12="\\x0c\\x00\\x00\\x00"', 'info124="\\x7c\\x00\\x00\\x00"',
                   'bpp8="\\x08\\x00"', 'bpp24="\\x18\\x00"', 'bpp32="\\x20\\x00"',
                   'bitfields="\\x03\\x00\\x00\\x00"', 'neg1="\\xff\\xff\\xff\\xff"', 'int_min="\\x00\\x00\\x00\\x80"',
                   'mask_r="\\x00\\x00\\xff\\x00"'])

write("ppm.dict", ["# Netpbm header tokens (make_dicts.py)", '"P6"', '"P5"', '"255"', '"65535"', '"#"', '"\\x0a"',
                   '"4294967295"', '"9999999999"'])

json_keys = ["format", "entries", "tactic", "time_ms", "gpulab_version", "target", "gpu_name", "compute_capability",
             "cuda_runtime_version", "cudnn_version", "cublaslt_version", "precision", "max_batch", "input",
             "output", "name", "classes", "metadata", "values", "steps", "weights", "kind", "inputs", "weight",
             "bias", "flops_per_image", "activation", "clip", "conv", "kernel", "stride", "pads", "dilation",
             "groups", "has_residual", "space_to_depth", "block", "pad_top", "pad_left", "fused_values",
             "pointwise", "fn", "alpha", "beta", "softmax", "pool", "ceil_mode", "count_include_pad", "dtype",
             "shape", "offset", "bytes", "h", "w", "c", "c_valid", "float32", "float16", "bfloat16", "int64", "fp32",
             "tf32", "fp16", "bf16", "stem", "concat", "gemm", "cast", "mul", "add", "maxpool", "avgpool",
             "global_avgpool", "sigmoid", "hard_sigmoid", "hard_swish"]
json_lines = ["# JSON syntax and the keys of plan headers and timing caches (make_dicts.py)"] + \
    [f'"{t}"' for t in ["{", "}", "[", "]", ":", ",", "null", "true", "false", "-1", "1e308",
                         "9223372036854775807", "18446744073709551615", "-9223372036854775808"]] + \
    ['"\\\\u0000"', '"\\\\ud800"'] + [f'"\\"{k}\\""' for k in json_keys]
write("json.dict", json_lines)
write("plan.dict", json_lines + ['magic="GPULABPL"', 'v3="\\x03\\x00\\x00\\x00"'])

http = ["GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE ", " HTTP/1.1\\r\\n",
        " HTTP/1.0\\r\\n", "\\r\\n", "\\r\\n\\r\\n", "/metrics", "/", "?", "%", "%00", "%zz", "#", "Host: ",
        "Content-Length: ", "Transfer-Encoding: chunked", "Connection: close", "Connection: keep-alive",
        "Expect: 100-continue", "Range: bytes=", "Accept-Encoding: gzip",
        "Content-Type: multipart/form-data; boundary=", "Content-Type: application/x-www-form-urlencoded", "--",
        "0\\r\\n\\r\\n", "ffffffffffffffff", "-1", "18446744073709551616"]
# libFuzzer's dictionary syntax escapes only \\, \" and \xAB: CR and LF are written as \x0d, \x0a.
write("metrics_request.dict", ["# HTTP/1.1 request syntax (RFC 9112) and headers cpp-httplib reads (make_dicts.py)"] +
      [f'"{w}"'.replace("\\r", "\\x0d").replace("\\n", "\\x0a") for w in http])
