"""The input `gpulab bench` times (docs/metrics.md, src/measure/bench.h fill_bench_input): float32
NCHW, element i of the batch the i-th value of a 32-bit LCG, state = state * 1664525 + 1013904223
(mod 2^32) from 12345, mapped to (state >> 8) / 2^23 - 1 in [-1, 1). Image j is the same in every
batch, so the first images are enough to check the logits of `gpulab bench --save-output`."""

import numpy as np

MULTIPLIER, INCREMENT, SEED = 1664525, 1013904223, 12345


def bench_input(images: int, c: int, h: int, w: int) -> np.ndarray:
    """The first `images` images of gpulab bench's input, float32 [images, c, h, w]."""
    n = images * c * h * w
    states = np.empty(n, dtype=np.uint64)
    state = SEED
    for i in range(n):  # a few hundred thousand steps for a few 224x224 images: well under a second
        state = (state * MULTIPLIER + INCREMENT) & 0xFFFFFFFF
        states[i] = state
    values = (states >> np.uint64(8)).astype(np.float64) / float(1 << 23) - 1.0  # exact in float32
    return values.astype(np.float32).reshape(images, c, h, w)
