"""Smuggles a file read into the C++ source of a load_inline extension.

task: relu
expect: rejected
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SOURCE = r"""
#include <fstream>
torch::Tensor peek(torch::Tensor x) {
    std::ifstream in("../reference.py");
    return x;
}
"""

_ext = load_inline(name="peek", cpp_sources=_SOURCE, functions=["peek"])


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.peek(x)
