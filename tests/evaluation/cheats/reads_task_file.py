"""Reads the task's reference.py from disk and executes it.

task: relu
expect: rejected
"""

import torch.nn as nn

namespace = {}
with open("../reference.py") as fh:
    exec(fh.read(), namespace)


class ModelNew(namespace["Model"]):
    pass


_unused = nn.Module
