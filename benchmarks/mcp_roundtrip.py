"""MCP round-trip cost of retrieve_rules beside a no-op tool, over real stdio.

    python -m benchmarks.mcp_roundtrip [--items 1000] [--calls 300] [-k 5]

Starts `sage-mcp` as an editor would (a subprocess on a fresh database holding
the starter memory plus --items synthetic items) and times, interleaved so
drift on a shared machine hits both alike:
  ping      a tool that touches nothing: the floor (JSON-RPC + stdio + SDK dispatch)
  retrieve  retrieve_rules on a free-text task: ranking, the rulebook, and the
            episode and retrieval-log writes, plus that same floor
and, for reference, Engine.retrieve called in-process on the same kind of database.
Prints median and p99 in ms and each path's ratio to ping.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from benchmarks.retrieval import VOCAB, pct, populate
from sage_engine.config import Config
from sage_engine.engine import Engine


def prepare(db: Path, items: int, seed: int) -> None:
    with Engine(Config(db_path=db, auto_consolidate_every=0)) as engine:
        engine.import_starter()
        populate(engine, items, random.Random(seed))


async def over_stdio(db: Path, tasks: list[str], k: int) -> dict[str, list[float]]:
    script = Path(sys.executable).parent / "sage-mcp"
    params = StdioServerParameters(command=str(script), args=["--db", str(db), "--quiet"],
                                   env={"SAGE_AUTO_CONSOLIDATE_EVERY": "0"})
    times: dict[str, list[float]] = {"ping": [], "retrieve": []}
    async with Client(params) as client:
        for task in tasks[:20]:  # warm: imports, SQLite page cache, worker threads
            await client.call_tool("ping", {})
            await client.call_tool("retrieve_rules", {"task": task, "k": k})
        for task in tasks:
            t0 = time.perf_counter()
            r = await client.call_tool("ping", {})
            t1 = time.perf_counter()
            s = await client.call_tool("retrieve_rules", {"task": task, "k": k})
            t2 = time.perf_counter()
            assert not r.is_error and not s.is_error, (r, s)
            times["ping"].append((t1 - t0) * 1e3)
            times["retrieve"].append((t2 - t1) * 1e3)
    return times


def in_process(db: Path, tasks: list[str], k: int) -> list[float]:
    out = []
    with Engine(Config(db_path=db, auto_consolidate_every=0)) as engine:
        for task in tasks:
            t0 = time.perf_counter()
            engine.retrieve(task, k=k)
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1_000, help="synthetic items besides the starter memory")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("-k", type=int, default=5)
    args = ap.parse_args()
    rng = random.Random(1024)
    tasks = [" ".join(rng.sample(VOCAB, 6)) for _ in range(args.calls)]
    with tempfile.TemporaryDirectory() as tmp:
        served, local = Path(tmp) / "served.db", Path(tmp) / "local.db"
        prepare(served, args.items, 7)
        prepare(local, args.items, 7)
        times = anyio.run(over_stdio, served, tasks, args.k)
        times["engine"] = in_process(local, tasks, args.k)
    base_med, base_p99 = statistics.median(times["ping"]), pct(times["ping"], 0.99)
    print(f"stdio round trips, {args.calls} calls each, {args.items} items + starter, k={args.k}")
    print(f"{'path':>24} {'median ms':>10} {'p99 ms':>8} {'x ping (median)':>16} {'x ping (p99)':>13}")
    labels = {"ping": "ping (no-op tool)", "retrieve": "retrieve_rules", "engine": "Engine.retrieve in-proc"}
    for path in ("ping", "retrieve", "engine"):
        ts = times[path]
        med, p99 = statistics.median(ts), pct(ts, 0.99)
        print(f"{labels[path]:>24} {med:>10.3f} {p99:>8.3f} {med / base_med:>16.2f} {p99 / base_p99:>13.2f}")


if __name__ == "__main__":
    main()
