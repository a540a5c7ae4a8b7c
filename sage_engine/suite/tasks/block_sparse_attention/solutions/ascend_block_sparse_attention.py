"""Block-sparse attention (local window + global sink block) for Ascend
(Triton-Ascend): flash attention that visits only the allowed key blocks.

For query block `qb` of the layout, the allowed key blocks are the sink
block 0 and `qb - window .. qb + window`; the kernel walks exactly those, so
work grows with the window, not with seq_len squared. Layout blocks larger
than 64 are processed in 64 x 64 sub-tiles (fp32 scores stay at 16 KiB of
L0C). One program per cube core takes every `num_programs`-th
(batch*head, query tile) item; softmax statistics are fp32.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

CUBE_CORES = 20  # Ascend910B3
TILE = 64


@triton.jit
def _attend(q, acc, m_i, l_i, k_ptr, v_ptr, base, kb_start, kb_end, seq, scale, HEAD_DIM: tl.constexpr, TILE: tl.constexpr):
    d = tl.arange(0, HEAD_DIM)
    for start in range(kb_start, kb_end, TILE):
        cols = start + tl.arange(0, TILE)
        kv_mask = cols[:, None] < seq
        k = tl.load(k_ptr + base + cols[:, None] * HEAD_DIM + d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(cols[None, :] < seq, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + base + cols[:, None] * HEAD_DIM + d[None, :], mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def block_sparse_kernel(q_ptr, k_ptr, v_ptr, o_ptr, bh, seq, block_size, window, scale, HEAD_DIM: tl.constexpr, TILE: tl.constexpr):
    pid = tl.program_id(0)
    q_tiles = tl.cdiv(seq, TILE)
    n_blocks = tl.cdiv(seq, block_size)
    d = tl.arange(0, HEAD_DIM)
    for item in range(pid, bh * q_tiles, tl.num_programs(0)):
        head = item // q_tiles
        qt = item % q_tiles
        base = head * seq * HEAD_DIM
        rows = qt * TILE + tl.arange(0, TILE)
        q = tl.load(q_ptr + base + rows[:, None] * HEAD_DIM + d[None, :], mask=rows[:, None] < seq, other=0.0)
        m_i = tl.full([TILE], -1.0e30, dtype=tl.float32)
        l_i = tl.zeros([TILE], dtype=tl.float32)
        acc = tl.zeros([TILE, HEAD_DIM], dtype=tl.float32)
        qb = (qt * TILE) // block_size
        lo = tl.maximum(qb - window, 0)
        hi = tl.minimum(qb + window + 1, n_blocks)
        if lo > 0:  # the global sink block, when the window does not cover it
            acc, m_i, l_i = _attend(q, acc, m_i, l_i, k_ptr, v_ptr, base, 0, block_size, seq, scale, HEAD_DIM, TILE)
        acc, m_i, l_i = _attend(q, acc, m_i, l_i, k_ptr, v_ptr, base, lo * block_size, hi * block_size, seq, scale, HEAD_DIM, TILE)
        out = acc / l_i[:, None]
        tl.store(o_ptr + base + rows[:, None] * HEAD_DIM + d[None, :], out.to(o_ptr.dtype.element_ty), mask=rows[:, None] < seq)


class ModelNew(nn.Module):
    def __init__(self, seq_len: int, block_size: int, window: int):
        super().__init__()
        if seq_len % block_size or block_size % TILE and TILE % block_size:
            raise ValueError("seq_len must be a multiple of block_size, and block_size a multiple or divisor of 64")
        self.block_size = block_size
        self.window = window

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        b, h, seq, dim = q.shape
        out = torch.empty_like(q)
        tile = min(TILE, self.block_size)
        items = b * h * triton.cdiv(seq, tile)
        block_sparse_kernel[(min(CUBE_CORES, items),)](
            q,
            k,
            v,
            out,
            b * h,
            seq,
            self.block_size,
            self.window,
            1.0 / math.sqrt(dim),
            HEAD_DIM=dim,
            TILE=tile,
        )
        return out
