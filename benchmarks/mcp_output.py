"""The largest tool result SAGE's MCP server can be made to produce, in tokens.

    python -m benchmarks.mcp_output [--items 60] [--attempts 200]

Fills a fresh memory with items at every size limit (title, content and code
at their maxima), one long episode (--attempts attempts, every item shown),
then calls each tool at the arguments that make its result largest and
prints the text an agent's client receives, in characters and in tokens
(characters / 3: code and JSON tokenise denser than prose, so this errs
high). Claude Code refuses a tool result over 25,000 tokens.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import anyio
from mcp import Client

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.models import Adoption, EvalResult, NewItem
from sage_mcp.mcp.server import create_server

CAP_TOKENS = 25_000
SILU = Path(__file__).resolve().parents[1] / "sage_engine" / "suite" / "tasks" / "silu" / "solutions" / "cpu_sigmoid_mul.py"


def tokens(chars: int) -> int:
    return -(-chars // 3)


def fill(config: Config, n_items: int, n_attempts: int) -> int:
    with Engine(config) as engine:
        engine.init(starter=False)
        for i in range(n_items):
            words = " ".join(f"softmax{i} tiling{j} row{j % 7} block{i}" for j in range(400))
            engine.add_item(
                NewItem(
                    title=(f"softmax lesson {i} " + "t" * 200)[: config.max_title_chars],
                    content=(words * 3)[: config.max_content_chars],
                    code=(f"# {i}\n" + "x = load(ptr + offs)  # tile\n" * 2000)[: config.max_code_chars],
                    operator="softmax",
                    tags=[f"tag{j}" for j in range(32)],
                ),
                dedup=False,
            )
        r = engine.retrieve("softmax tiling row block", operator="softmax", k=50, client="bench")
        for _ in range(3):
            engine.retrieve("softmax tiling row block", operator="softmax", k=50, episode_id=r.episode_id, client="bench")
        template = EvalResult(status="incorrect", message="m" * 2000, task="silu", backend="cpu", hardware="x", candidate_hash="h")
        ids = [i.id for i in r.items]
        for n in range(n_attempts):
            engine.record_result(template, episode_id=r.episode_id, adopted=[Adoption(id=ids[n % len(ids)], evidence="e" * 500)])
        return r.episode_id


async def measure(config: Config, episode: int) -> list[tuple[str, int]]:
    calls = [
        ("search_memory", {"query": "softmax tiling row block", "k": 50}),
        ("retrieve_rules", {"task": "softmax tiling row block", "operator": "softmax", "k": 50}),
        ("show_episode", {"episode_id": episode}),
        ("list_tasks", {}),
        ("show_task", {"task": "silu"}),
        ("show_item", {"item_id": 1}),
        ("memory_stats", {}),
        ("consolidate", {"dry_run": True, "budget_tokens": 10**9}),
        ("compile_and_bench", {"candidate": str(SILU), "task": "silu", "trials": 20}),
    ]
    out = []
    async with Client(create_server(config)) as c:
        for name, args in calls:
            r = await c.call_tool(name, args)
            text = "".join(getattr(block, "text", "") for block in r.content)
            if r.is_error:
                text = f"(error) {text}"
            out.append((name, len(text)))
            if r.structured_content is not None and not r.is_error:
                out.append((f"{name} (structured)", len(json.dumps(r.structured_content))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=60)
    parser.add_argument("--attempts", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Config(auto_consolidate_every=0, timing_budget_s=0.2, eval_wait_s=600).with_db(Path(tmp) / "memory.db")
        episode = fill(config, args.items, args.attempts)
        rows = anyio.run(measure, config, episode)
    print(f"{'tool':34s} {'chars':>9s} {'tokens':>8s}")
    for name, chars in rows:
        flag = "  OVER" if tokens(chars) > CAP_TOKENS else ""
        print(f"{name:34s} {chars:9d} {tokens(chars):8d}{flag}")
    worst = max(rows, key=lambda r: r[1])
    print(f"largest: {worst[0]} at {tokens(worst[1])} tokens (cap {CAP_TOKENS})")


if __name__ == "__main__":
    main()
