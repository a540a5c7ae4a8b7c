"""Retrieval latency at 10k and 100k items, on SQLite and on PostgreSQL,
each beside the bare lexical index query on the same table.

    python -m benchmarks.retrieval [--sizes 10000 100000] [--queries 200] [--stores sqlite postgres]
                                   [--pg-url postgresql://...]

For each store and size it times, interleaved over the same queries so drift
on a shared machine hits every path alike:
  bare     the index query alone (FTS5 MATCH + bm25, or tsvector @@ + ts_rank_cd; ORDER BY, LIMIT)
  search   Engine.search_items: lexical candidates + filters + utility/adoption/exploration ranking
  retrieve Engine.retrieve: search + resident rulebook + episode and retrieval-log writes, one transaction
and prints p50 and p95 in ms, each path's ratio to its store's bare query,
and PostgreSQL's retrieve beside SQLite's. Without --pg-url a throwaway
PostgreSQL cluster is started on 127.0.0.1 (Debian's postgresql package).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Iterator

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.memory.text import query_terms

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
        rows.append(
            {
                "kind": "experience",
                "scope": "team",
                "title": f"{' '.join(words[:4])} #{i}",
                "content": " ".join(words + rng.sample(VOCAB, 20)),
                "tags": ["bench"],
                "utility": rng.uniform(-0.2, 0.6),
                "n_retrieved": rng.randint(0, 30),
                "adoption_rate": rng.random() * 0.5,
                "tokens": 60,
                "created_at": now,
                "updated_at": now,
            }
        )
    for start in range(0, n, 10_000):
        engine.store.items.insert_many(rows[start : start + 10_000])


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


@contextlib.contextmanager
def postgres_databases(url: str | None) -> Iterator:
    """A factory of fresh databases: on the given server, or on a throwaway cluster."""
    if url:
        yield lambda: url
        return
    from tests.support.postgres import remove_cluster, start_cluster

    cluster = start_cluster()
    try:
        yield cluster.create_database
    finally:
        remove_cluster(cluster)


def measure(engine: Engine, n: int, queries: int, k: int, rng: random.Random) -> dict[str, list[float]]:
    populate(engine, n, rng)
    texts = [" ".join(rng.sample(VOCAB, 6)) for _ in range(queries)]
    pool = engine.config.candidate_pool
    times: dict[str, list[float]] = {"bare": [], "search": [], "retrieve": []}
    for text in texts[:10]:  # warm the caches and the connection pool
        engine.retrieve(text, k=k)
    for text in texts:
        t0 = time.perf_counter()
        engine.store.lexical_floor(query_terms(text), pool)
        t1 = time.perf_counter()
        engine.search_items(text, k=k)
        t2 = time.perf_counter()
        engine.retrieve(text, k=k)
        t3 = time.perf_counter()
        times["bare"].append((t1 - t0) * 1e3)
        times["search"].append((t2 - t1) * 1e3)
        times["retrieve"].append((t3 - t2) * 1e3)
    return times


def run(sizes: list[int], queries: int, k: int, stores: list[str], pg_url: str | None) -> None:
    print(f"{'store':>9} {'items':>8} {'path':>9} {'p50 ms':>8} {'p95 ms':>8} {'p50 x bare':>11} {'p95 x bare':>11}")
    retrieve_p50: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp, postgres_databases(pg_url) if "postgres" in stores else contextlib.nullcontext() as new_pg:
        for n in sizes:
            for store in stores:
                db = new_pg() if store == "postgres" else str(Path(tmp) / f"bench-{n}.db")
                with Engine(Config(auto_consolidate_every=0).with_db(db)) as engine:
                    times = measure(engine, n, queries, k, random.Random(1024))
                base50, base95 = statistics.median(times["bare"]), pct(times["bare"], 0.95)
                for path, ts in times.items():
                    p50, p95 = statistics.median(ts), pct(ts, 0.95)
                    print(f"{store:>9} {n:>8} {path:>9} {p50:>8.2f} {p95:>8.2f} {p50 / base50:>11.2f} {p95 / base95:>11.2f}")
                retrieve_p50[(store, n)] = statistics.median(times["retrieve"])
        for n in sizes:
            if ("sqlite", n) in retrieve_p50 and ("postgres", n) in retrieve_p50:
                ratio = retrieve_p50[("postgres", n)] / retrieve_p50[("sqlite", n)]
                print(f"retrieve p50 at {n} items: postgres {ratio:.2f}x sqlite")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--stores", nargs="+", choices=["sqlite", "postgres"], default=["sqlite", "postgres"])
    ap.add_argument("--pg-url", help="an empty PostgreSQL database to use (default: a throwaway local cluster)")
    ap.add_argument("-k", type=int, default=5)
    args = ap.parse_args()
    run(args.sizes, args.queries, args.k, args.stores, args.pg_url)


if __name__ == "__main__":
    main()
