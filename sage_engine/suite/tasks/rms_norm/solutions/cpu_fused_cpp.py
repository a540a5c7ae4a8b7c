"""RMSNorm fused into one C++ kernel: per row, a SIMD sum of squares then one scaling pass.

The row stays in cache between the two loops, so the tensor is read from
memory once and written once.
"""

import hashlib

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat,
                "rms_norm: float32 tensors only");
    x = x.contiguous();
    weight = weight.contiguous();
    const int64_t cols = weight.numel();
    TORCH_CHECK(x.size(-1) == cols, "rms_norm: weight length must match the last dimension");
    const int64_t rows = x.numel() / cols;
    auto y = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const float feps = static_cast<float>(eps);
    #pragma omp parallel for schedule(static) num_threads(at::get_num_threads())
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = xp + r * cols;
        float* yr = yp + r * cols;
        float sumsq = 0.0f;
        #pragma omp simd reduction(+ : sumsq)
        for (int64_t c = 0; c < cols; ++c) sumsq += xr[c] * xr[c];
        const float inv = 1.0f / std::sqrt(sumsq / static_cast<float>(cols) + feps);
        #pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * inv * wp[c];
    }
    return y;
}
"""

_ext = load_inline(
    name="sage_rms_norm_" + hashlib.sha256(_SOURCE.encode()).hexdigest()[:10],
    cpp_sources=_SOURCE,
    functions=["rms_norm"],
    extra_cflags=["-O3", "-march=native", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.rms_norm(x, self.weight, self.eps)
