"""FLOPs counted where torch's own counter is silent on the CPU."""

from __future__ import annotations

import torch

from sage_engine.evaluation.child.profiling import flop_counter, flop_registry


def test_attention_on_the_cpu_is_counted_as_torch_counts_the_accelerators_kernels():
    from torch.utils.flop_counter import sdpa_flop_count

    q, k, v = torch.randn(2, 4, 128, 64), torch.randn(2, 4, 96, 64), torch.randn(2, 4, 96, 64)
    assert flop_registry is not None
    counter = flop_counter(flop_registry)
    with torch.no_grad(), counter:
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert dict(counter.flops) == {"float32": float(sdpa_flop_count(q.shape, k.shape, v.shape))}
