"""Fixtures for the agent loop: a replayed model behind the real SDKs.

No model API is reachable from the test machine, so the model is the one
test double here: recorded response bodies (Messages API or chat-completions
format, in `recordings/`) are served through the SDK's own HTTP layer, an
`httpx2.MockTransport` under `anthropic.Anthropic` (or an `httpx.MockTransport`
under the OpenAI-compatible client). Request building, response parsing,
tool_use blocks and usage all run through the real client code. Everything
else (SQLite store, sandboxed evaluation, ATU, consolidation) is real.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any, Callable

import anthropic
import httpx
import pytest

try:  # anthropic 2.x speaks through httpx2; older SDKs through httpx
    import httpx2
except ImportError:  # pragma: no cover - depends on the installed SDK
    httpx2 = httpx

from sage_engine.agent.llm import AnthropicLLM, OpenAICompatLLM
from sage_engine.agent.strategies import get_strategy, strategy_config
from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.models import Adoption, NewItem
from tests.support.engine import make_result

HERE = Path(__file__).parent
TASKS = HERE / "fixtures" / "tasks"
RECORDINGS = HERE / "recordings"
MODEL = "claude-sonnet-4-5-20250929"
_TASK_RE = re.compile(r"# Task `([^`]+)`")


def recording(name: str) -> dict[str, list[dict[str, Any]]]:
    return json.loads((RECORDINGS / f"{name}.json").read_text(encoding="utf-8"))


class Replay:
    """Serves recorded bodies in order, per conversation: a task's
    conversation is recognised by the task header of its first message, a
    rule rewrite by its forced `write_rule` tool. Every request body is kept
    for assertions. `fail_from` makes request number N (1-based) and later
    fail with a connection error, like a network outage."""

    def __init__(self, script: dict[str, list[dict[str, Any]]], *, fail_from: int | None = None):
        self.script = {k: list(v) for k, v in script.items()}
        self.requests: list[dict[str, Any]] = []
        self.keys: list[str] = []
        self.fail_from = fail_from
        self._lock = threading.Lock()

    @staticmethod
    def key(body: dict[str, Any]) -> str:
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and (choice.get("name") or (choice.get("function") or {}).get("name")) == "write_rule":
            return "abstract"
        found = _TASK_RE.search(json.dumps(body.get("messages", [])[:2]))
        return found.group(1) if found else "?"

    def respond(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            key = self.key(body)
            self.keys.append(key)
            if self.fail_from is not None and len(self.requests) >= self.fail_from:
                raise httpx2.ConnectError("simulated network outage")
            queue = self.script.get(key) or []
            if not queue:
                return 500, _error(f"replay has no response left for {key!r}")
            return 200, queue.pop(0)

    def anthropic_handler(self, request: httpx2.Request) -> httpx2.Response:
        # This SDK version sends the key as a bearer token; older ones used x-api-key.
        authed = request.headers.get("x-api-key") == "test" or request.headers.get("authorization") == "Bearer test"
        if request.url.path != "/v1/messages" or not authed:
            return httpx2.Response(400, json=_error(f"unexpected request {request.method} {request.url.path}"))
        status, body = self.respond(json.loads(request.content))
        return httpx2.Response(status, json=body)

    def openai_handler(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions") or request.headers.get("authorization") != "Bearer test":
            return httpx.Response(400, json=_error(f"unexpected request {request.method} {request.url.path}"))
        status, body = self.respond(json.loads(request.content))
        return httpx.Response(status, json=body)

    def first_text(self, index: int) -> str:
        """Text of the first user message of request `index`, whatever its shape."""
        content = self.requests[index]["messages"][0]["content"]
        return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)

    def tool_results(self, index: int) -> list[dict[str, Any]]:
        """tool_result blocks of the last user turn of request `index`."""
        last = self.requests[index]["messages"][-1]
        return [b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]


def _error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def anthropic_llm(replay: Replay) -> AnthropicLLM:
    client = anthropic.Anthropic(
        api_key="test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(replay.anthropic_handler)),
    )
    return AnthropicLLM(MODEL, client=client)


def openai_llm(replay: Replay) -> OpenAICompatLLM:
    http = httpx.Client(transport=httpx.MockTransport(replay.openai_handler))
    return OpenAICompatLLM("gpt-4.1", base_url="https://llm.test/v1", api_key="test", http_client=http)


def config_in(folder: Path, strategy: str = "atu") -> Config:
    # Small timing budget and one trial: the tests are about the loop, not timing quality;
    # no speedup term in the reward, so its sign never hangs on a noisy timing.
    base = Config(
        db_path=folder / "memory.db",
        cache_dir=folder / "cache",
        auto_consolidate_every=0,
        timing_budget_s=0.2,
        timing_min_reps=5,
        correctness_trials=1,
        candidate_roots=str(TASKS),
        speedup_weight=0.0,
    )
    return strategy_config(base, get_strategy(strategy))


@pytest.fixture
def agent_config(tmp_path: Path) -> Config:
    return config_in(tmp_path)


@pytest.fixture
def make_engine(tmp_path: Path) -> Callable[..., Engine]:
    opened: list[Engine] = []

    def make(strategy: str = "atu", **kwargs: Any) -> Engine:
        engine = Engine(config_in(tmp_path, strategy), **kwargs)
        opened.append(engine)
        return engine

    yield make
    for engine in opened:
        engine.close()


def seed_items(engine: Engine) -> tuple[int, int]:
    """#1 fits scale_shift and is adopted in the recordings; #2 is shown
    beside it and ignored."""
    fused = engine.add_item(
        NewItem(
            title="Fuse elementwise scale and shift",
            content="For elementwise y = a*x + b, one torch.addcmul pass beats a multiply and an add on CPU.",
            tags=["elementwise", "cpu"],
            family="elementwise",
        )
    ).item.id
    other = engine.add_item(
        NewItem(
            title="Accumulate elementwise reductions in float32",
            content="When an elementwise or row reduction reads half inputs, accumulate in float32 and cast once at the end.",
            tags=["reduction", "elementwise"],
        )
    ).item.id
    return fused, other


def task_ref(name: str) -> str:
    return str(TASKS / name)


GRID_A = (
    "Persistent grid loop over blocks",
    "Launch one program per vector core and loop over the blocks inside the kernel with a stride of the "
    "program count; a BLOCK of 4096 fp32 elements fits the Unified Buffer.",
)
GRID_B = (
    "Loop over blocks in a persistent grid",
    "Launch one program per core and loop inside the kernel over the blocks with the program count as "
    "stride, so the grid stays small; BLOCK 4096 fits the Unified Buffer.",
)


def proven_cluster(engine) -> list[int]:
    """Two near-duplicate experiences, both adopted in correct episodes of
    three operators: eligible for consolidation and clustered together."""
    ids = [engine.add_item(NewItem(title=t, content=c, backend="triton")).item.id for t, c in (GRID_A, GRID_B)]
    for op in ("softmax", "layernorm", "gelu"):
        r = engine.retrieve("persistent grid loop over blocks", operator=op)
        assert set(ids) <= {i.id for i in r.items}
        engine.record_result(make_result("correct", 1.0, 2.0), episode_id=r.episode_id)
        engine.record_adoption(r.episode_id, [Adoption(id=i, evidence="grid loop") for i in ids])
    return ids
