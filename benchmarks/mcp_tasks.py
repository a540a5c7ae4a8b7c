"""What an evaluation that outlives its call costs, on a real `sage serve`.

    python -m benchmarks.mcp_tasks [--handles 10] [--long-s 60] [--pairs 2]

handle   time from a task-augmented `tools/call` of compile_and_bench to its
         task handle, while two other evaluations run (goal < 100 ms); the
         same for compile_and_bench with wait_s=0 (status running)
polling  one long evaluation (its candidate busy for --long-s seconds on the
         CPU) alone, then with `tasks/get` and `get_result(wait_s=0)` every
         second; pairs alternate so drift on a shared machine hits both alike.
         Reports each evaluation's own duration_s.

Raw JSON-RPC at protocol 2025-11-25 over one keep-alive HTTP connection per
client (httpx), as a task-capable client speaks it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
SILU = (Path(__file__).resolve().parents[1] / "sage_engine" / "suite" / "tasks" / "silu" / "solutions" / "cpu_sigmoid_mul.py").read_text()


def busy(seconds: float) -> str:
    """A correct SiLU whose import keeps a CPU busy for `seconds`."""
    return f"import time\n_t = time.perf_counter()\nwhile time.perf_counter() - _t < {seconds}:\n    pass\n" + SILU


class Session:
    def __init__(self, url: str, token: str):
        self.url, self.n = url, 0
        self.http = httpx.Client(timeout=600)
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
        init = self.request("initialize", hello)
        self.headers["mcp-protocol-version"] = init["result"]["protocolVersion"]
        self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers)

    def request(self, method: str, params: dict | None = None) -> dict:
        self.n += 1
        r = self.http.post(self.url, json={"jsonrpc": "2.0", "id": self.n, "method": method, "params": params or {}}, headers=self.headers)
        r.raise_for_status()
        if "mcp-session-id" in r.headers:
            self.headers["mcp-session-id"] = r.headers["mcp-session-id"]
        if r.headers["content-type"].startswith("text/event-stream"):
            return next(m for m in (json.loads(x[5:]) for x in r.text.splitlines() if x.startswith("data:")) if m.get("id") == self.n)
        return r.json()

    def tool(self, name: str, arguments: dict, **extra) -> dict:
        return self.request("tools/call", {"name": name, "arguments": arguments, **extra})


def serve(db: Path) -> tuple[subprocess.Popen, str, str]:
    env = {**os.environ, "SAGE_AUTO_CONSOLIDATE_EVERY": "0", "SAGE_EVAL_QUEUE_MAX": "64", "SAGE_EVAL_TIMEOUT_S": "600"}
    proc = subprocess.Popen([str(BIN / "sage"), "--db", str(db), "serve", "--port", "0"], stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    while not any(line.startswith("connect:") for line in lines):
        line = proc.stderr.readline()
        if not line:
            raise SystemExit("sage serve exited:\n" + "".join(lines))
        lines.append(line)
    banner = "".join(lines)
    return proc, re.search(r"listening on (\S+)", banner).group(1), re.search(r"^token \(.*\): (\S+)$", banner, re.M).group(1)


def handles(s: Session, n: int) -> None:
    """Two evaluations running, then n task creations and n wait_s=0 calls, each cancelled at once."""
    slow = {"candidate": busy(120), "task": "silu", "trials": 1}
    long = [s.tool("compile_and_bench", slow, task={})["result"]["task"]["taskId"] for _ in range(2)]
    task_ms, running_ms = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        created = s.tool("compile_and_bench", {"candidate": SILU, "task": "silu", "trials": 1}, task={})
        task_ms.append((time.perf_counter() - t0) * 1000)
        s.request("tasks/cancel", {"taskId": created["result"]["task"]["taskId"]})
        t0 = time.perf_counter()
        r = s.tool("compile_and_bench", {"candidate": SILU, "task": "silu", "trials": 1, "wait_s": 0})
        running_ms.append((time.perf_counter() - t0) * 1000)
        assert r["result"]["structuredContent"]["status"] == "running", r
    for task_id in long:
        s.request("tasks/cancel", {"taskId": task_id})
    for name, xs in (("task handle", task_ms), ("wait_s=0 running", running_ms)):
        xs = sorted(xs)
        print(f"{name:18s} n={len(xs)} p50 {statistics.median(xs):7.1f} ms  max {xs[-1]:7.1f} ms  (two evaluations running)")


def long_run(s: Session, poll: Session | None, seconds: float) -> float:
    created = s.tool("compile_and_bench", {"candidate": busy(seconds), "task": "silu", "trials": 1, "wait_s": 0})
    attempt = created["result"]["structuredContent"]["attempt_id"]
    task = s.tool("consolidate", {"dry_run": True}, task={})["result"]["task"]["taskId"]  # something for tasks/get to read
    stop = threading.Event()

    def poller() -> None:
        while not stop.wait(1.0):
            poll.request("tasks/get", {"taskId": task})
            poll.tool("get_result", {"attempt_id": attempt, "wait_s": 0})

    thread = threading.Thread(target=poller) if poll is not None else None
    if thread:
        thread.start()
    while True:
        r = s.tool("get_result", {"attempt_id": attempt, "wait_s": 30})["result"]["structuredContent"]
        if r["status"] != "running":
            break
    stop.set()
    if thread:
        thread.join()
    assert r["status"] == "correct", r["message"]
    return r["duration_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handles", type=int, default=10)
    parser.add_argument("--long-s", type=float, default=60.0)
    parser.add_argument("--pairs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url, token = serve(Path(tmp) / "memory.db")
        try:
            s = Session(url, token)
            s.tool("compile_and_bench", {"candidate": SILU, "task": "silu", "trials": 1})  # warm the workers
            handles(s, args.handles)
            alone, polled = [], []
            for _ in range(args.pairs):
                alone.append(long_run(s, None, args.long_s))
                polled.append(long_run(s, Session(url, token), args.long_s))
            print(f"polling: evaluation of a {args.long_s:g} s candidate: alone {alone} s, polled every second {polled} s")
            print(f"         medians {statistics.median(alone):.2f} s vs {statistics.median(polled):.2f} s")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
