"""MCP round-trip cost of retrieve_rules beside a no-op tool, over real stdio
and real HTTP, on SQLite and on PostgreSQL.

    python -m benchmarks.mcp_roundtrip [--items 0] [--calls 300] [-k 5]
                                       [--stores sqlite postgres] [--transports stdio http]

Starts servers as clients do (`sage-mcp` over stdio; `sage serve` over
streamable HTTP, one keep-alive connection) on a fresh memory holding the
starter memory plus --items synthetic items, and times, interleaved so drift
on a shared machine hits both alike:
  ping      a tool that touches nothing: the floor (JSON-RPC + transport + SDK dispatch)
  retrieve  retrieve_rules on a free-text task: ranking, the rulebook, and the
            episode and retrieval-log writes, plus that same floor
Prints p50 and p95 in ms, retrieve's ratio to ping per server, and HTTP ping's
ratio to stdio ping.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import AsyncIterator

import anyio
from mcp import Client, StdioServerParameters

from benchmarks.retrieval import VOCAB, pct, populate, postgres_databases
from sage_engine.config import Config
from sage_engine.engine import Engine

BIN = Path(sys.executable).parent
ENV = {"SAGE_AUTO_CONSOLIDATE_EVERY": "0"}


def prepare(db: str, items: int, seed: int) -> None:
    with Engine(Config(auto_consolidate_every=0).with_db(db)) as engine:
        engine.init()
        populate(engine, items, random.Random(seed))


@contextlib.asynccontextmanager
async def client_for(transport: str, db: str, tmp: Path) -> AsyncIterator[Client]:
    if transport == "stdio":
        params = StdioServerParameters(command=str(BIN / "sage-mcp"), args=["--db", db, "--quiet"], env=ENV)
        async with Client(params) as client:
            yield client
        return
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with serving(db, tmp, ENV) as (url, token, _proc):
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


@contextlib.asynccontextmanager
async def serving(db: str, tmp: Path, env: dict[str, str]) -> AsyncIterator[tuple[str, str, subprocess.Popen]]:
    """`sage serve --port 0` on `db` with `env`: yields its URL, its token and the process.
    Its log goes on to `tmp/serve.log` once the banner is read (a full pipe would stall it)."""
    proc = subprocess.Popen(
        [str(BIN / "sage"), "--db", db, "serve", "--port", "0", "--token-file", str(tmp / "token")],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={"PATH": "", **env},
    )
    try:
        banner = ""
        while "connect:" not in banner:
            line = await anyio.to_thread.run_sync(proc.stderr.readline)
            if not line:
                raise RuntimeError(f"sage serve exited: {banner}")
            banner += line
        url = re.search(r"listening on (\S+)", banner).group(1)
        token = re.search(r"^token \(.*\): (\S+)$", banner, re.M).group(1)
        threading.Thread(target=_drain, args=(proc.stderr, tmp / "serve.log"), daemon=True).start()
        yield url, token, proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _drain(stream, path: Path) -> None:
    with open(path, "a") as log:
        for line in stream:
            log.write(line)


async def round_trips(transport: str, db: str, tasks: list[str], k: int, tmp: Path) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"ping": [], "retrieve": []}
    async with client_for(transport, db, tmp) as client:
        for task in tasks[:20]:  # warm: imports, page cache, worker threads, connections
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=0, help="synthetic items besides the starter memory")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--stores", nargs="+", choices=["sqlite", "postgres"], default=["sqlite", "postgres"])
    ap.add_argument("--transports", nargs="+", choices=["stdio", "http"], default=["stdio", "http"])
    ap.add_argument("--pg-url", help="an empty PostgreSQL database to use (default: a throwaway local cluster)")
    ap.add_argument("-k", type=int, default=5)
    args = ap.parse_args()
    rng = random.Random(1024)
    tasks = [" ".join(rng.sample(VOCAB, 6)) for _ in range(args.calls)]
    print(f"{args.calls} calls per path, starter memory + {args.items} items, k={args.k}")
    print(f"{'store':>9} {'transport':>9} {'path':>9} {'p50 ms':>8} {'p95 ms':>8} {'p50 x ping':>11} {'p95 x ping':>11}")
    pings: dict[tuple[str, str], float] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        postgres_databases(args.pg_url) if "postgres" in args.stores else contextlib.nullcontext() as new_pg,
    ):
        for store in args.stores:
            for transport in args.transports:
                db = new_pg() if store == "postgres" else str(Path(tmp) / f"{transport}.db")
                prepare(db, args.items, 7)
                times = anyio.run(round_trips, transport, db, tasks, args.k, Path(tmp))
                base50, base95 = statistics.median(times["ping"]), pct(times["ping"], 0.95)
                pings[(store, transport)] = base50
                for path, ts in times.items():
                    p50, p95 = statistics.median(ts), pct(ts, 0.95)
                    print(f"{store:>9} {transport:>9} {path:>9} {p50:>8.2f} {p95:>8.2f} {p50 / base50:>11.2f} {p95 / base95:>11.2f}")
    for store in args.stores:
        if (store, "stdio") in pings and (store, "http") in pings:
            print(f"{store}: HTTP ping p50 {pings[(store, 'http')] / pings[(store, 'stdio')]:.2f}x stdio ping")


if __name__ == "__main__":
    main()
