import torch
import torch.nn as nn
import json
import os

class Model(nn.Module):
    """
    Simple model that performs a GELU activation.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor, approximate='none') -> torch.Tensor:
        return torch.nn.functional.gelu(x, approximate=approximate)


def get_input_groups():
    json_path = os.path.join(os.path.dirname(__file__), "1_gelu_mini.json")
    with open(json_path, "r") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    dtype_map = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    input_groups = []
    for case in cases:
        x_info, approximate_info = case["inputs"]
        x = torch.randn(x_info["shape"], dtype=dtype_map[x_info["dtype"]])
        input_groups.append([x, approximate_info["value"]])
    return input_groups


def get_init_inputs():
    return []
