"""silu(gate) * up fused into one C++ pass with a vectorisable exp.

The reference makes two passes (silu, then mul) and allocates an intermediate;
this reads both inputs once and writes the output once.
"""

import hashlib

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>

static inline float fast_exp(float x) {
    // 2^n * e^r with |r| <= ln2/2; degree-6 Taylor keeps the relative error near 2e-7.
    x = std::min(std::max(x, -87.0f), 88.0f);
    float t = x * 1.44269504088896341f;
    int32_t ni = static_cast<int32_t>(t + std::copysign(0.5f, t));
    float n = static_cast<float>(ni);
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    return p * __builtin_bit_cast(float, (ni + 127) << 23);
}

torch::Tensor swiglu(torch::Tensor gate, torch::Tensor up) {
    TORCH_CHECK(gate.scalar_type() == at::kFloat && up.scalar_type() == at::kFloat,
                "swiglu: float32 tensors only");
    TORCH_CHECK(gate.sizes() == up.sizes(), "swiglu: gate and up must have the same shape");
    gate = gate.contiguous();
    up = up.contiguous();
    auto y = torch::empty_like(gate);
    const float* g = gate.data_ptr<float>();
    const float* u = up.data_ptr<float>();
    float* out = y.data_ptr<float>();
    const int64_t n = gate.numel();
    const int64_t chunk = 4096;
    const int64_t chunks = (n + chunk - 1) / chunk;
    #pragma omp parallel for schedule(static) num_threads(at::get_num_threads())
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t end = std::min(n, (c + 1) * chunk);
        #pragma omp simd
        for (int64_t i = c * chunk; i < end; ++i) {
            float v = g[i];
            out[i] = v / (1.0f + fast_exp(-v)) * u[i];
        }
    }
    return y;
}
"""

_ext = load_inline(
    name="sage_swiglu_" + hashlib.sha256(_SOURCE.encode()).hexdigest()[:10],
    cpp_sources=_SOURCE,
    functions=["swiglu"],
    # Without -fno-trapping-math GCC will not if-convert the clamps, and the loop stays scalar.
    extra_cflags=["-O3", "-march=native", "-fopenmp", "-fno-trapping-math"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return _ext.swiglu(gate, up)
