"""`sage-lsp` end to end: a real server subprocess, VS Code's capabilities,
a real SQLite file and the real evaluation harness on a tiny task."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcRequestCancelled

from sage_engine.engine import Engine
from sage_engine.models import Adoption, NewItem

from tests.lsp.support import GOOD, WRONG, execute, lenses, open_doc

# A cold evaluation child imports torch; a whole benchmark stays well under this.
BOUND_S = 120


async def test_result_stored_by_another_process_shows_as_lens_and_goes_stale_on_edit(lsp, workspace):
    path = workspace.write("kernels/good.py", GOOD)
    with Engine(workspace.config()) as engine:
        stored = engine.evaluate(GOOD, str(workspace.root / "double.py"), candidate_path=str(path))
    assert stored.status == "correct", stored.message

    uri = open_doc(lsp, path)
    (lens,) = await lenses(lsp, uri)
    assert lens.command.command == "sage.benchmark"
    assert "x vs reference · correct · cpu · just now" in lens.command.title
    assert not lens.command.title.endswith("stale")

    lsp.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=GOOD + "\n# tweak\n")],
        )
    )
    (lens,) = await lenses(lsp, uri)
    assert lens.command.title.endswith("· stale")


async def test_benchmark_command_evaluates_reports_progress_and_refreshes_lenses(lsp, workspace):
    path = workspace.write("kernels/good.py", GOOD)
    uri = open_doc(lsp, path)
    (lens,) = await lenses(lsp, uri)
    assert lens.command.title == "SAGE: benchmark vs double.py"

    summary = await asyncio.wait_for(execute(lsp, *[lens.command.command], *lens.command.arguments), BOUND_S)
    assert summary["result"]["status"] == "correct" and summary["stale"] is False
    assert summary["summary"].startswith(f"{summary['result']['speedup']:.2f}x vs reference · correct · cpu")
    assert workspace.received.get("refresh"), "the server must ask VS Code to refresh lenses"
    (reports,) = lsp.progress_reports.values()
    assert isinstance(reports[0], types.WorkDoneProgressBegin) and isinstance(reports[-1], types.WorkDoneProgressEnd)

    (lens,) = await lenses(lsp, uri)
    assert lens.command.title == "SAGE: " + summary["summary"]
    assert list(lsp.diagnostics[uri]) == []  # a correct kernel clears the Problems panel


async def test_hover_after_a_benchmark_says_where_the_time_went(lsp, workspace):
    path = workspace.write("kernels/good.py", GOOD)
    uri = open_doc(lsp, path)
    summary = await asyncio.wait_for(execute(lsp, "sage.benchmark", uri), BOUND_S)
    profile = summary["result"]["profile"]
    assert summary["result"]["status"] == "correct" and profile["bound"] in ("memory", "compute", "latency")
    hover = await lsp.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=5, character=8))
    )
    bound = {"memory": "memory-bound", "compute": "compute-bound", "latency": "launch/latency-bound"}[profile["bound"]]
    assert f"**Where the time goes** ({bound}): " in hover.contents.value
    assert profile["summary"].split(";")[0] in hover.contents.value  # its first clause has nothing to escape
    # The panel's picture: inline SVG in the page's colours (no background of its own).
    svg = await execute(lsp, "sage.roofline", uri)
    assert svg.startswith("<svg") and 'class="point candidate"' in svg and 'class="background"' not in svg
    assert await execute(lsp, "sage.roofline", open_doc(lsp, workspace.write("kernels/new.py", GOOD))) is None


async def test_failing_candidate_gets_a_diagnostic_that_quotes_the_lens_and_names_the_case(lsp, workspace):
    path = workspace.write("kernels/wrong.py", WRONG)
    uri = open_doc(lsp, path)
    summary = await asyncio.wait_for(execute(lsp, "sage.benchmark", uri), BOUND_S)
    assert summary["result"]["status"] == "incorrect"
    headline = "incorrect on the default inputs: output: 2048 of 2048 elements exceed tolerance"
    assert summary["summary"].startswith(headline + " · cpu")
    # Published before the command's response, so already here.
    (diag,) = lsp.diagnostics[uri]
    assert diag.source == "sage" and diag.severity == types.DiagnosticSeverity.Error
    assert WRONG.splitlines()[diag.range.start.line].startswith("class ModelNew")
    (lens,) = await lenses(lsp, uri)
    assert diag.message == headline and headline in lens.command.title
    # The whole mismatch (index, values, tolerances) is one step away, not on the line.
    (related,) = diag.related_information
    assert related.message == summary["result"]["message"] and "first at index" in related.message
    hover = await lsp.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=5, character=8))
    )
    assert summary["result"]["message"] in hover.contents.value


async def test_compile_error_is_placed_on_its_line(lsp, workspace):
    broken = GOOD.replace("return torch.add(x + x, 1)", "return torch.add(x + x, 1")
    path = workspace.write("kernels/broken.py", broken)
    uri = open_doc(lsp, path)
    summary = await asyncio.wait_for(execute(lsp, "sage.benchmark", uri), BOUND_S)
    assert summary["result"]["status"] == "compile_error"
    lines = [d.range.start.line for d in lsp.diagnostics[uri]]
    assert lines and all(6 <= n <= len(broken.splitlines()) - 1 for n in lines), lines


async def test_evaluation_by_an_agent_shows_up_in_an_open_document(lsp, workspace):
    path = workspace.write("kernels/wrong.py", WRONG)
    uri = open_doc(lsp, path)
    assert (await lenses(lsp, uri))[0].command.title == "SAGE: benchmark vs double.py"

    waiting = asyncio.ensure_future(lsp.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS))
    with Engine(workspace.config()) as engine:
        engine.evaluate(str(path), str(workspace.root / "double.py"), candidate_path=str(path))
    await asyncio.wait_for(waiting, 30)
    assert lsp.diagnostics[uri] and lsp.diagnostics[uri][0].source == "sage"
    (lens,) = await lenses(lsp, uri)
    assert lens.command.title.startswith("SAGE: incorrect")


async def test_hover_on_a_kernel_lists_resident_rules_and_task_items(lsp, workspace):
    with Engine(workspace.config()) as engine:
        rule_id = _make_resident_rule(engine, "Fuse the scale and the bias into one pass")
        engine.add_item(
            NewItem(
                title="Elementwise double plus one: write 2x+1 in one kernel",
                content="One read, one write: fuse double_plus_one elementwise ops.",
                operator="double_plus_one",
                family="elementwise",
            )
        )
        rule = engine.get_item(rule_id)
    path = workspace.write("kernels/good.py", GOOD)
    uri = open_doc(lsp, path)
    hover = await lsp.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=5, character=8))
    )
    md = hover.contents.value
    assert "`ModelNew` (candidate module) · task" in md
    assert f"{rule.title} · utility {rule.utility:+.2f} · adopted {rule.n_adopted}×" in md
    assert "Elementwise double plus one" in md
    nothing = await lsp.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=2, character=0))
    )
    assert nothing is None


async def test_file_without_task_offers_set_task_and_set_task_writes_the_header(lsp, workspace):
    source = GOOD.replace("# sage: task=../double.py\n", "")
    path = workspace.write("kernels/untracked.py", source)
    uri = open_doc(lsp, path)
    (lens,) = await lenses(lsp, uri)
    assert (lens.command.title, lens.command.command, list(lens.command.arguments)) == ("SAGE: Set task…", "sage.setTask", [uri])

    with pytest.raises(JsonRpcException, match="no task set for untracked.py"):
        await execute(lsp, "sage.benchmark", uri)
    with pytest.raises(JsonRpcException, match="'no_such_task'"):
        await execute(lsp, "sage.setTask", uri, "no_such_task")
    assert "edits" not in workspace.received  # a task that does not load is refused before any edit

    done = await execute(lsp, "sage.setTask", uri, "../double.py")
    assert done["via"] == "header"
    (edit,) = workspace.received["edits"]
    (text_edit,) = edit.edit.changes[uri]
    assert text_edit.new_text == "# sage: task=../double.py\n" and text_edit.range.start.line == 0


async def test_memory_commands_list_quarantine_and_delete_items(lsp, workspace):
    with Engine(workspace.config()) as engine:
        a = engine.add_item(NewItem(title="Tile rows to fit UB", content="Split each row into 32 KB tiles.")).item.id
        b = engine.add_item(NewItem(title="Prefer vector ops for elementwise", content="Use the vector unit.")).item.id
    listing = await execute(lsp, "sage.memory")
    assert {i["id"] for i in listing["items"]} == {a, b} and listing["rules"] == []
    assert (await execute(lsp, "sage.quarantine", a))["status"] == "quarantined"
    assert (await execute(lsp, "sage.delete", b))["status"] == "deleted"
    assert (await execute(lsp, "sage.memory"))["items"] == []
    report = await execute(lsp, "sage.consolidate", True)
    assert report["dry_run"] is True and report["consolidation_id"] is None
    with pytest.raises(JsonRpcException, match="argument 1 \\(item_id\\) must be int"):
        await execute(lsp, "sage.quarantine", "seven")


async def test_retrieve_then_adopt_closes_the_episode_and_credits_the_item(lsp, workspace):
    with Engine(workspace.config()) as engine:
        item = engine.add_item(
            NewItem(title="double plus one fused elementwise", content="Compute 2x+1 in one pass over memory.", operator="double_plus_one")
        ).item
    path = workspace.write("kernels/good.py", GOOD)
    uri = open_doc(lsp, path)
    shown = await execute(lsp, "sage.retrieveRules", uri)
    assert item.id in [i["id"] for i in shown["retrieval"]["items"]]
    summary = await asyncio.wait_for(execute(lsp, "sage.benchmark", uri), BOUND_S)
    assert summary["result"]["episode_id"] == shown["retrieval"]["episode_id"]

    report = await execute(
        lsp, "sage.recordAdoption", uri, [item.id], None, {"title": "torch.add fuses the +1", "content": "x + x then add 1 in one call."}
    )
    assert report["closed"] is True and report["reward"] > 0
    (update,) = [u for u in report["updates"] if u["item_id"] == item.id]
    assert update["adopted"] and update["after"] > update["before"]
    assert report["new_item"]["title"] == "torch.add fuses the +1"
    (lens,) = await lenses(lsp, uri)
    assert "1 rule adopted" in lens.command.title


def _make_resident_rule(engine: Engine, title: str) -> int:
    """Adopt one item in correct episodes for three operators, then consolidate:
    the way a rule becomes resident."""
    from tests.support.engine import make_result

    item_id = engine.add_item(NewItem(title=title, content="Do both in the same loop over the tensor.")).item.id
    for op in ("softmax", "layernorm", "gelu"):
        r = engine.retrieve(title, operator=op)
        assert item_id in [i.id for i in r.items]
        engine.record_result(make_result("correct", 1.0, 2.0), episode_id=r.episode_id)
        engine.record_adoption(r.episode_id, [Adoption(id=item_id, evidence="applied")])
    (rule,) = engine.consolidate().rulebook
    return rule.id


async def test_two_clicks_on_the_same_source_share_one_evaluation(lsp, workspace):
    path = workspace.write("kernels/good.py", GOOD)
    uri = open_doc(lsp, path)
    first, second = await asyncio.wait_for(
        asyncio.gather(execute(lsp, "sage.benchmark", uri), execute(lsp, "sage.benchmark", uri, 6)), BOUND_S
    )
    assert first["result"]["attempt_id"] == second["result"]["attempt_id"]
    with Engine(workspace.config()) as engine:
        assert len(engine.results_for(str(path))) == 1


async def test_shutdown_is_answered_while_an_evaluation_runs(lsp, workspace):
    path = workspace.write("kernels/good.py", GOOD)
    uri = open_doc(lsp, path)
    started = asyncio.ensure_future(lsp.wait_for_notification(types.PROGRESS))
    running = asyncio.ensure_future(execute(lsp, "sage.benchmark", uri))
    await asyncio.wait_for(started, BOUND_S)
    # VS Code gives a server a few seconds to answer shutdown before killing it.
    # (pygls 2.1 alone fails it: "dictionary changed size during iteration".)
    await asyncio.wait_for(lsp.shutdown_async(None), 5)
    # The command in flight is answered, as cancelled, not left open.
    with pytest.raises(JsonRpcRequestCancelled):
        await asyncio.wait_for(running, BOUND_S)
    lsp.exit(None)
    # The evaluation in flight finishes and the engine closes; then the process ends.
    assert await asyncio.wait_for(lsp._server.wait(), BOUND_S) == 0
    lsp.capabilities = None  # already shut down: the fixture must not do it again


async def test_ascend_c_source_gets_hover_but_is_benchmarked_through_its_python_module(lsp, workspace):
    source = '// sage: task=gelu\nextern "C" __global__ __aicore__ void gelu_custom(GM_ADDR x, GM_ADDR y)\n{\n}\n'
    path = workspace.write("kernels/gelu_custom.cpp", source)
    uri = open_doc(lsp, path, language="cpp")
    assert await lenses(lsp, uri) == []
    hover = await lsp.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=1, character=50))
    )
    assert "`gelu_custom` (Ascend C kernel) · task `gelu`" in hover.contents.value
    with pytest.raises(JsonRpcException, match="benchmark the .py file that builds this kernel"):
        await execute(lsp, "sage.benchmark", uri)


async def test_an_episode_closed_elsewhere_does_not_block_the_next_benchmark(lsp, workspace):
    path = workspace.write("kernels/good.py", GOOD)
    uri = open_doc(lsp, path)
    shown = await execute(lsp, "sage.retrieveRules", uri)
    with Engine(workspace.config()) as engine:
        engine.close_episode(shown["retrieval"]["episode_id"])
    summary = await asyncio.wait_for(execute(lsp, "sage.benchmark", uri), BOUND_S)
    assert summary["result"]["status"] == "correct" and summary["result"]["episode_id"] is None


async def test_a_failed_command_carries_the_error_kind_mcp_and_the_cli_show(lsp, workspace):
    with pytest.raises(JsonRpcException) as bad:
        await execute(lsp, "sage.quarantine", "seven")
    with pytest.raises(JsonRpcException) as missing:
        await execute(lsp, "sage.quarantine", 424242)
    assert bad.value.data == {"kind": "invalid_input"}
    assert missing.value.data == {"kind": "not_found"}


async def test_retrieving_rules_waits_for_the_database_off_the_event_loop(lsp, workspace):
    # Another process holds the memory's write lock: the retrieve's write
    # transaction waits for it, and meanwhile the server still answers the editor.
    import sqlite3

    path = workspace.write("kernels/good.py", GOOD)
    uri = open_doc(lsp, path)
    await lenses(lsp, uri)  # the memory exists and the server has opened it
    holder = sqlite3.connect(workspace.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        retrieving = asyncio.ensure_future(execute(lsp, "sage.retrieveRules", uri))
        await asyncio.sleep(1.0)  # the retrieve is now waiting for the write lock
        shown = await asyncio.wait_for(lenses(lsp, uri), 5)  # answered while the retrieve waits
        assert shown and not retrieving.done()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    retrieval = (await asyncio.wait_for(retrieving, BOUND_S))["retrieval"]
    assert retrieval["episode_id"] > 0


@pytest.mark.parametrize("argument", ["--pipe=/tmp/sage.sock", "--socket=5007", "--node-ipc", "--port=5007"])
def test_transports_other_than_stdio_are_refused_with_a_message_naming_stdio(argument):
    done = subprocess.run([sys.executable, "-m", "sage_mcp.lsp", argument], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"{argument}: sage-lsp speaks LSP over stdio only; start it with --stdio" in done.stderr


async def test_a_uri_that_is_no_file_is_a_clear_error_not_a_traceback(lsp):
    """An editor's Output panel has a URI too; asking about it is answered
    with what is wrong, and the server logs no traceback."""
    with pytest.raises(JsonRpcException, match="neither an open document nor a file") as raised:
        await execute(lsp, "sage.lastResult", "output:extension-output-sage-npu.sage-kernels-%231-SAGE")
    assert raised.value.data == {"kind": "not_found"}
