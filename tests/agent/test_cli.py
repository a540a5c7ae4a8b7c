"""`sage run` end to end: dry run, a concurrent run against a local HTTP
endpoint replaying recorded responses, the report, and resume rules."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from sage_engine.engine import Engine
from sage_mcp.cli import cli
from tests.agent.conftest import MODEL, TASKS, Replay, config_in, proven_cluster, recording, seed_items


def _env(**extra):
    env = {
        "SAGE_CANDIDATE_ROOTS": str(TASKS),
        "SAGE_TIMING_BUDGET_S": "0.2",
        "SAGE_TIMING_MIN_REPS": "5",
        "SAGE_CORRECTNESS_TRIALS": "1",
        "ANTHROPIC_API_KEY": "test",
        "ANTHROPIC_BASE_URL": None,
    }
    env.update(extra)
    return env


@pytest.fixture
def endpoint():
    """A local HTTP server speaking the Messages API from recordings, so
    the CLI's own client (built from --base-url) is exercised over a socket."""
    replay = Replay(recording("two_tasks"))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            status, payload = replay.respond(body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield replay, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(timeout=10)


def test_dry_run_prints_prompts_with_resident_rules_and_retrieved_items(tmp_path):
    with Engine(config_in(tmp_path)) as engine:
        fused, _ = seed_items(engine)
        grid = proven_cluster(engine)
        rule = engine.consolidate().rulebook[0]
        episodes = engine.stats().episodes_closed
    # A global rulebook: the grid rule was learned on other operators, so a
    # per-task rulebook would (rightly) not show it to scale_shift.
    result = CliRunner().invoke(
        cli,
        ["--db", str(tmp_path / "memory.db"), "run", "--dry-run", "--suite", str(TASKS), "--tasks", "scale_shift"],
        env=_env(ANTHROPIC_API_KEY=None, SAGE_RULEBOOK_SCOPE="global"),
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "===== system prompt =====" in out and "submit_kernel" in out and "adopted_ids" in out
    assert "## Resident rules" in out and f"[#{rule.id}] {rule.title}" in out and rule.content.splitlines()[0] in out
    assert rule.derived_from == grid
    assert f"[#{fused}] Fuse elementwise scale and shift" in out
    assert "return x * 2.0 + 1.0" in out  # the reference itself
    with Engine(config_in(tmp_path)) as engine:
        assert engine.stats().episodes_closed == episodes and engine.stats().episodes_open == 0


def test_run_command_solves_a_suite_concurrently_writes_the_report_and_refuses_changed_settings(tmp_path, endpoint):
    replay, url = endpoint
    db, run_dir = tmp_path / "memory.db", tmp_path / "run"
    args = [
        "--db",
        str(db),
        "run",
        "--suite",
        str(TASKS),
        "--model",
        MODEL,
        "--rounds",
        "2",
        "--concurrency",
        "2",
        "--run-dir",
        str(run_dir),
        "--base-url",
        url,
    ]
    result = CliRunner().invoke(cli, args, env=_env())
    assert result.exit_code == 0, result.output
    assert "2/2 solved (execution rate 100%)" in result.output
    assert sorted(replay.keys) == ["row_sum"] * 3 + ["scale_shift"] * 3
    report = json.loads((run_dir / "report.json").read_text())
    assert report["metrics"]["execution_rate"] == 1.0 and report["run"]["concurrency"] == 2
    assert report["metrics"]["tokens_total"] == 2 * (1200 + 120 + 1500 + 5 + 1600 + 80)
    for name in ("report.md", "plots/learning_curve.png", "plots/speedups.png", "candidates/row_sum.py", "transcripts/scale_shift.json"):
        assert (run_dir / name).is_file(), name
    assert (run_dir / "plots" / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| execution rate (solved / finished) | 100.0% |" in (run_dir / "report.md").read_text()

    rebuilt = CliRunner().invoke(cli, ["run", "--report", str(run_dir), "--report", str(run_dir)], env=_env())
    assert rebuilt.exit_code == 0 and "2/2 solved" in rebuilt.output
    assert "| run | strategy | model |" in rebuilt.output and rebuilt.output.count("| atu | " + MODEL) == 2

    changed = CliRunner().invoke(cli, args[:-2] + ["--model", "claude-opus-4-5"], env=_env())
    assert changed.exit_code == 2 and "started with other settings" in changed.output

    again = CliRunner().invoke(cli, ["--db", str(db), "run", "--run-dir", str(run_dir), "--base-url", url], env=_env())
    assert again.exit_code == 0, again.output
    assert len(replay.requests) == 6  # nothing left to do, no model call


def test_run_without_an_api_key_says_how_to_set_one(tmp_path):
    result = CliRunner().invoke(
        cli, ["--db", str(tmp_path / "m.db"), "run", "--suite", str(TASKS)], env=_env(ANTHROPIC_API_KEY=None, ANTHROPIC_AUTH_TOKEN=None)
    )
    assert result.exit_code == 2 and "set ANTHROPIC_API_KEY" in result.output
