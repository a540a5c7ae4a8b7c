"""A team's `sage serve` under load: N agents running whole episodes at
once over streamable HTTP, readers beside them, then a check that nothing
was lost, doubled or credited wrongly.

    python -m benchmarks.load [--clients 8] [--readers 2] [--seconds 60]
                              [--store sqlite|postgres] [--pg-url URL]

Every agent runs episodes on the same task with the same `clientInfo` name,
as copies of one real agent do: retrieve_rules, compile_and_bench on a
bundled candidate adopting the first item shown, record_adoption with a
lesson. Readers call search_memory and memory_stats in a loop. Printed:
episodes a minute, p50/p99 per tool (over the run, and over the calls that
started after the opening 10 s, when every agent's first retrieve_rules
arrives at once and the server's workers start), the evaluation's wait for a worker
(the call's time less the evaluation's own), errors by kind (`busy` is the
documented back-pressure), the server's resident memory over the run, and
the integrity check:
  - every episode, attempt and adoption a client was told of is stored
    exactly once, closed, credited as its client was told;
  - no item has two utility-log rows for one episode;
  - every item's utility equals a serial replay of its utility log from its
    utility before the run (each row starts where the last ended and takes
    ATU's step), so no concurrent update was lost.
Exits 1 when the check fails or an error other than `busy` occurred.
Automatic consolidation is off on the server, so utilities move only by ATU.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

import anyio

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.memory import utility

BIN = Path(sys.executable).parent
TASK = "silu"
CANDIDATE = Path(__file__).resolve().parents[1] / "sage_engine" / "suite" / "tasks" / TASK / "solutions" / "cpu_sigmoid_mul.py"
TOOLS = ("retrieve_rules", "compile_and_bench", "get_result", "record_adoption", "search_memory", "memory_stats")
KIND = re.compile(r"^(?:Error executing tool \w+: )?([a-z_]+): ")
RETRY = re.compile(r"try again in about (\d+) s")
WARM_S = 10.0


@dataclass
class Tally:
    # Per tool, each call's (seconds after the agents started, latency ms): the
    # calls after the opening WARM_S (every agent's first retrieve_rules at one
    # instant, the server's workers starting) are the steady state the goals are about.
    calls: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: collections.defaultdict(list))
    start: float = 0.0  # time.monotonic() when the agents started
    wall_s: float = 0.0
    errors: collections.Counter = field(default_factory=collections.Counter)
    queue_wait: list[float] = field(default_factory=list)
    episodes: dict[int, dict[str, Any]] = field(default_factory=dict)  # what each client was told
    rss_mb: list[tuple[float, float]] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)

    def error(self, tool: str, text: str) -> None:
        m = KIND.match(text)
        self.errors[f"{tool}: {m.group(1) if m else text[:160]}"] += 1


def serving(db: str, tmp: Path, workers: int) -> contextlib.AbstractAsyncContextManager:
    """`sage serve` as `benchmarks/mcp_roundtrip.py` starts it, with no automatic consolidation."""
    from benchmarks.mcp_roundtrip import serving as serve

    return serve(db, tmp, {"SAGE_AUTO_CONSOLIDATE_EVERY": "0", "SAGE_EVAL_WORKERS": str(workers), "PATH": "/usr/bin:/bin"})


@contextlib.asynccontextmanager
async def client(url: str, token: str) -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with Client(streamable_http_client(url, http_client=http)) as c:  # one name for all: the SDK's
        yield c


async def call(c: Any, tally: Tally, tool: str, args: dict[str, Any]) -> dict[str, Any] | float | None:
    """The tool's structured answer; on an error (counted by kind) None, or for
    `busy` the seconds it says to wait before trying again."""
    t0 = time.perf_counter()
    began = time.monotonic()
    r = await c.call_tool(tool, args)
    took = time.perf_counter() - t0
    tally.calls[tool].append((began - tally.start, took * 1e3))
    if r.is_error:
        text = " ".join(getattr(part, "text", "") for part in r.content)
        tally.error(tool, text)
        busy = RETRY.search(text) if "busy" in text else None
        return float(busy.group(1)) if busy else None
    out = r.structured_content or {}
    if tool == "compile_and_bench" and out.get("duration_s") is not None and out.get("status") != "running":
        tally.queue_wait.append(max(0.0, took - float(out["duration_s"])) * 1e3)
    return out


async def agent(url: str, token: str, n: int, deadline: float, tally: Tally, source: str) -> None:
    async with client(url, token) as c:
        while time.monotonic() < deadline:
            shown = await call(c, tally, "retrieve_rules", {"task": TASK, "k": 3})
            if not isinstance(shown, dict):
                continue
            episode = shown["episode_id"]
            ids = [i["id"] for i in shown.get("resident_rules", []) + shown.get("items", [])]
            adopted = ids[:1]
            told: dict[str, Any] = {"attempts": [], "adopted": adopted, "credited": None}
            tally.episodes[episode] = told
            args = {"candidate": source, "task": TASK, "episode_id": episode, "adopted_ids": adopted, "trials": 1}
            result = await call(c, tally, "compile_and_bench", args)
            while isinstance(result, float) and time.monotonic() < deadline:
                await anyio.sleep(result)  # as an MCP client does with a `busy` answer
                result = await call(c, tally, "compile_and_bench", args)
            while isinstance(result, dict) and result.get("status") == "running":
                # Past its wait_s the call answered with the attempt id: read the result by it, as an agent does.
                result = await call(c, tally, "get_result", {"attempt_id": result["attempt_id"]})
            if isinstance(result, dict) and result.get("attempt_id") is not None:
                told["attempts"].append(result["attempt_id"])
            report = await call(
                c,
                tally,
                "record_adoption",
                {
                    "episode_id": episode,
                    "adopted": [{"id": i, "evidence": "sigmoid times x in one pass"} for i in adopted],
                    "lesson": {
                        "title": f"silu as x * sigmoid(x), agent {n}",
                        "content": "One fused pass over x: torch.sigmoid(x) * x; no intermediate buffer.",
                    },
                },
            )
            if isinstance(report, dict):
                told["credited"] = report.get("credited")
                told["closed"] = report.get("closed")


async def reader(url: str, token: str, deadline: float, tally: Tally) -> None:
    async with client(url, token) as c:
        while time.monotonic() < deadline:
            await call(c, tally, "search_memory", {"query": "fused elementwise activation", "k": 5})
            await call(c, tally, "memory_stats", {})


async def watch_rss(proc: subprocess.Popen, deadline: float, tally: Tally, start: float) -> None:
    while time.monotonic() < deadline:
        try:
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    tally.rss_mb.append((time.monotonic() - start, int(line.split()[1]) / 1024))
        except OSError:
            return
        await anyio.sleep(5)


async def run_load(db: str, clients: int, readers: int, seconds: float, workers: int, tmp: Path) -> Tally:
    tally = Tally()
    source = CANDIDATE.read_text()
    async with serving(db, tmp, workers) as (url, token, proc):
        start = tally.start = time.monotonic()
        deadline = start + seconds
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_rss, proc, deadline, tally, start)
            for n in range(clients):
                tg.start_soon(agent, url, token, n, deadline, tally, source)
            for _ in range(readers):
                tg.start_soon(reader, url, token, deadline, tally)
        tally.wall_s = time.monotonic() - start
    log = tmp / "serve.log"
    if log.exists():  # what the server said of its errors, for any that are not back-pressure
        tally.server_errors = [
            line.rstrip() for line in log.read_text(errors="replace").splitlines() if "Error" in line or "error" in line
        ][-12:]
    return tally


def integrity(db: str, tally: Tally, before: dict[int, float], config: Config) -> list[str]:
    """What is wrong in the stored memory, compared with what the clients were told and with a replay."""
    problems: list[str] = []
    with Engine(config.with_db(db)) as engine:
        rows = engine.store.rows
        for episode, told in tally.episodes.items():
            found = rows("SELECT status, reward FROM episodes WHERE id = ?", (episode,))
            if len(found) != 1:
                problems.append(f"episode {episode}: {len(found)} rows")
                continue
            if told.get("closed") and found[0]["status"] != "closed":
                problems.append(f"episode {episode}: told closed, stored {found[0]['status']}")
            credited = found[0]["reward"] is not None
            if told.get("credited") is not None and credited != bool(told["credited"]):
                problems.append(f"episode {episode}: told credited={told['credited']}, stored credited={credited}")
            attempts = [r["id"] for r in rows("SELECT id FROM attempts WHERE episode_id = ?", (episode,))]
            if sorted(attempts) != sorted(told["attempts"]):
                problems.append(f"episode {episode}: attempts stored {attempts}, told {told['attempts']}")
            if told.get("closed"):
                adopted = sorted(r["item_id"] for r in rows("SELECT item_id FROM adoptions WHERE episode_id = ?", (episode,)))
                if adopted != sorted(told["adopted"]):
                    problems.append(f"episode {episode}: adoptions stored {adopted}, sent {told['adopted']}")
        for r in rows("SELECT episode_id, item_id, COUNT(*) AS n FROM utility_log GROUP BY episode_id, item_id HAVING COUNT(*) > 1"):
            problems.append(f"item {r['item_id']}: {r['n']} utility-log rows for episode {r['episode_id']}")
        for item in rows("SELECT id, utility FROM items"):
            log = rows("SELECT before, after, target, eta FROM utility_log WHERE item_id = ? ORDER BY id", (item["id"],))
            u = before.get(item["id"], 0.0)
            for i, entry in enumerate(log):
                if abs(entry["before"] - u) > 1e-9 or abs(utility.step(u, entry["target"], entry["eta"]) - entry["after"]) > 1e-9:
                    problems.append(f"item {item['id']}: utility-log row {i} starts at {entry['before']:.6f}, the replay is at {u:.6f}")
                    break
                u = entry["after"]
            if abs(u - item["utility"]) > 1e-9:
                problems.append(f"item {item['id']}: utility {item['utility']:.6f}, replay {u:.6f}")
    return problems


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(tally: Tally, clients: int, problems: list[str]) -> bool:
    wall = tally.wall_s
    closed = sum(1 for t in tally.episodes.values() if t.get("closed"))
    print(f"{clients} agents, {wall:.0f} s: {closed} episodes closed ({closed / wall * 60:.1f} a minute), {len(tally.episodes)} opened")
    print(
        f"{'tool':>18} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8}   after the first {WARM_S:.0f} s: {'calls':>6} {'p50 ms':>8} {'p99 ms':>8}"
    )
    for tool in TOOLS:
        ts = [ms for _, ms in tally.calls.get(tool, [])]
        later = [ms for began, ms in tally.calls.get(tool, []) if began >= WARM_S]
        if ts:
            steady = f"{len(later):>6} {statistics.median(later):>8.1f} {pct(later, 0.99):>8.1f}" if later else "     -"
            print(f"{tool:>18} {len(ts):>6} {statistics.median(ts):>8.1f} {pct(ts, 0.99):>8.1f}   {'':>20}{steady}")
    if tally.queue_wait:
        print(
            f"{'waiting for worker':>18} {len(tally.queue_wait):>6} {statistics.median(tally.queue_wait):>8.1f} "
            f"{pct(tally.queue_wait, 0.99):>8.1f}"
        )
    if tally.rss_mb:
        later = [mb for t, mb in tally.rss_mb if t >= 60] or [tally.rss_mb[-1][1]]
        print(
            f"server RSS: {tally.rss_mb[0][1]:.0f} MiB at start, {max(mb for _, mb in tally.rss_mb):.0f} MiB at most, "
            f"{min(later):.0f}-{max(later):.0f} MiB after the first minute"
        )
    print("errors: " + (", ".join(f"{k} x{n}" for k, n in tally.errors.most_common()) or "none"))
    bad_errors = {k: n for k, n in tally.errors.items() if not k.endswith(": busy")}
    if bad_errors and tally.server_errors:
        print("the server's log:\n  " + "\n  ".join(tally.server_errors))
    print(
        "integrity: "
        + (
            "ok (episodes, attempts, adoptions, utility-log rows; utilities = a serial replay)"
            if not problems
            else f"{len(problems)} problem(s)"
        )
    )
    for p in problems[:20]:
        print(f"  {p}")
    return not problems and not bad_errors


def measure(db: str, clients: int, readers: int, seconds: float, workers: int) -> tuple[Tally, list[str]]:
    config = Config(auto_consolidate_every=0)
    with Engine(config.with_db(db)) as engine:
        engine.init()
        before = {r["id"]: r["utility"] for r in engine.store.rows("SELECT id, utility FROM items")}
    with tempfile.TemporaryDirectory() as tmp:
        tally = anyio.run(run_load, db, clients, readers, seconds, workers, Path(tmp))
    return tally, integrity(db, tally, before, config)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--workers", type=int, default=2, help="the server's evaluation workers (eval_workers)")
    ap.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--pg-url", help="an empty PostgreSQL database (default: a throwaway local cluster)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if args.store == "postgres":
            from benchmarks.retrieval import postgres_databases

            db = stack.enter_context(postgres_databases(args.pg_url))()
        else:
            db = str(Path(tmp) / "memory.db")
        tally, problems = measure(db, args.clients, args.readers, args.seconds, args.workers)
        ok = report(tally, args.clients, problems)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
