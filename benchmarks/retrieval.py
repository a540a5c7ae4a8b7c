"""Retrieval latency at 1k, 10k and 100k items, beside a bare FTS5 query.

    python -m benchmarks.retrieval [--sizes 1000 10000 100000] [--queries 200]

For each size it times, in one interleaved run over the same queries:
  bare     the FTS5 MATCH + bm25 ORDER BY + LIMIT on the same table (the floor)
  search   Engine.search_items: FTS + filters + utility/adoption/exploration ranking
  retrieve Engine.retrieve: search + resident rulebook + episode and retrieval log writes
and prints median and p99 in ms and each one's ratio to bare.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.memory.text import fts_query

VOCAB = (
    "softmax layernorm rmsnorm matmul gemm attention flash sparse topk cumsum scan gather scatter embedding "
    "conv pool reduce sum mean max argmax adam optimizer loss crossentropy gelu silu relu fused tile block grid "
    "persistent loop core vector cube ub overflow l0c alignment fp16 bf16 fp32 accumulate cast mask tail pad "
    "buffer double pipeline copyin copyout datacopy tiling stride contiguous transpose broadcast index int32"
).split()


def populate(engine: Engine, n: int, rng: random.Random) -> None:
    now = time.time()
    rows = []
    for i in range(n):
        words = rng.sample(VOCAB, 12)
        rows.append(("experience", f"{' '.join(words[:4])} #{i}", " ".join(words + rng.sample(VOCAB, 20)),
                     '["bench"]', rng.uniform(-0.2, 0.6), rng.randint(0, 30), rng.random() * 0.5, 60, now, now))
    with engine.store.transaction() as conn:
        conn.executemany(
            "INSERT INTO items (kind, title, content, tags, utility, n_retrieved, adoption_rate, tokens, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(sizes: list[int], queries: int, k: int) -> None:
    rng = random.Random(1024)
    print(f"{'items':>8} {'path':>9} {'median ms':>10} {'p99 ms':>8} {'x bare (median)':>16} {'x bare (p99)':>13}")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            with Engine(Config(db_path=Path(tmp) / "bench.db", auto_consolidate_every=0)) as engine:
                populate(engine, n, rng)
                texts = [" ".join(rng.sample(VOCAB, 6)) for _ in range(queries)]
                times: dict[str, list[float]] = {"bare": [], "search": [], "retrieve": []}
                pool = engine.config.candidate_pool
                for text in texts:
                    # Interleaved so drift on a shared machine hits all three alike.
                    t0 = time.perf_counter()
                    engine.store.rows(
                        "SELECT rowid FROM items_fts WHERE items_fts MATCH ? ORDER BY bm25(items_fts) LIMIT ?",
                        (fts_query(text), pool))
                    t1 = time.perf_counter()
                    engine.search_items(text, k=k)
                    t2 = time.perf_counter()
                    engine.retrieve(text, k=k)
                    t3 = time.perf_counter()
                    times["bare"].append((t1 - t0) * 1e3)
                    times["search"].append((t2 - t1) * 1e3)
                    times["retrieve"].append((t3 - t2) * 1e3)
                base_med, base_p99 = statistics.median(times["bare"]), pct(times["bare"], 0.99)
                for path, ts in times.items():
                    med, p99 = statistics.median(ts), pct(ts, 0.99)
                    print(f"{n:>8} {path:>9} {med:>10.3f} {p99:>8.3f} {med / base_med:>16.2f} {p99 / base_p99:>13.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("-k", type=int, default=5)
    args = ap.parse_args()
    run(args.sizes, args.queries, args.k)


if __name__ == "__main__":
    main()
