"""Bias add and GELU fused into one C++ pass (OpenMP over rows, auto-vectorised).

erf is a rational approximation (the one Eigen and XLA use for float), so the
inner loop has no libm calls and the compiler vectorises it; the unfused
reference reads and writes the tensor twice.
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

static inline float erf_approx(float x) {
    // x * P(x^2) / Q(x^2) on [-4, 4] (erf is 1 to float precision beyond); abs error below 1e-7.
    x = std::min(std::max(x, -4.0f), 4.0f);
    float x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 - 2.10102402082508e-06f;
    p = p * x2 - 5.69250639462346e-05f;
    p = p * x2 - 7.34990630326855e-04f;
    p = p * x2 - 2.95459980854025e-03f;
    p = p * x2 - 1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;
    q = q * x2 - 2.13374055278905e-04f;
    q = q * x2 - 1.68282697438203e-03f;
    q = q * x2 - 7.37332916720468e-03f;
    q = q * x2 - 1.42647390514189e-02f;
    return x * p / q;
}

static inline float gelu(float v) {
    return 0.5f * v * (1.0f + erf_approx(v * 0.70710678118654752f));
}

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat,
                "bias_gelu: float32 tensors only");
    x = x.contiguous();
    bias = bias.contiguous();
    const int64_t cols = bias.numel();
    TORCH_CHECK(x.size(-1) == cols, "bias_gelu: bias length must match the last dimension");
    const int64_t rows = x.numel() / cols;
    auto y = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    #pragma omp parallel for schedule(static) num_threads(at::get_num_threads())
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = xp + r * cols;
        float* yr = yp + r * cols;
        #pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = gelu(xr[c] + bp[c]);
    }
    return y;
}
"""

_ext = load_inline(
    name="sage_bias_gelu_" + hashlib.sha256(_SOURCE.encode()).hexdigest()[:10],
    cpp_sources=_SOURCE,
    functions=["bias_gelu"],
    # Without -fno-trapping-math GCC will not if-convert the clamps, and the loop stays scalar.
    extra_cflags=["-O3", "-march=native", "-fopenmp", "-fno-trapping-math"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.bias_gelu(x, self.bias)
