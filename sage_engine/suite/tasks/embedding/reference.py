"""Embedding lookup: rows of a learned table selected by integer token ids."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
seq_len = 128
num_embeddings = 8192
embedding_dim = 256
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_embeddings, embedding_dim))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)


def get_inputs():
    return [torch.randint(0, num_embeddings, (batch_size, seq_len))]


def get_init_inputs():
    return [num_embeddings, embedding_dim]
