"""`sage-lsp` as editors other than VS Code drive it: neovim's and helix's
ways (no lens refresh, a message request for choices, settings in
initializationOptions or didChangeConfiguration, code actions), and the
behaviour every client gets on save."""

from __future__ import annotations

import asyncio

from lsprotocol import types

from sage_engine.engine import Engine

from tests.lsp.support import GOOD, WRONG, execute, lenses, open_doc

BOUND_S = 120  # a cold evaluation child imports torch; a whole benchmark stays well under this
NEOVIM_07 = "neovim@v0.7.0"  # no workspace/codeLens/refresh, no workspace/configuration


def _saved(client, uri: str) -> None:
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))


async def test_set_task_without_a_task_offers_the_task_list_and_writes_the_pick(start_lsp, workspace):
    lsp = await start_lsp(NEOVIM_07)
    path = workspace.write("kernels/softmax_try.py", GOOD.replace("# sage: task=../double.py\n", ""))
    uri = open_doc(lsp, path)
    (lens,) = await lenses(lsp, uri)
    assert (lens.command.command, list(lens.command.arguments)) == ("sage.setTask", [uri])

    workspace.pick = None  # the user dismisses the list: nothing changes
    assert await execute(lsp, lens.command.command, *lens.command.arguments) == {"uri": uri, "task": None, "via": None}
    assert "edits" not in workspace.received

    workspace.pick = "softmax"
    done = await execute(lsp, lens.command.command, *lens.command.arguments)
    assert done == {"uri": uri, "task": "softmax", "via": "header"}
    asked = workspace.received["asked"][-1]
    titles = [a.title for a in asked.actions]
    assert "softmax_try.py" in asked.message and titles[0] == "softmax · Row softmax"
    assert len(titles) == len((await execute(lsp, "sage.listTasks")))  # every bundled task is offered
    (edit,) = workspace.received["edits"]
    assert edit.edit.changes[uri][0].new_text == "# sage: task=softmax\n"


async def test_a_result_stored_elsewhere_shows_on_the_next_lens_request_without_refresh_support(start_lsp, workspace):
    # No poll at all: the lens request itself notices the memory changed.
    lsp = await start_lsp(NEOVIM_07, poll=0)
    path = workspace.write("kernels/wrong.py", WRONG)
    uri = open_doc(lsp, path)
    assert (await lenses(lsp, uri))[0].command.title == "SAGE: benchmark vs double.py"
    with Engine(workspace.config()) as engine:  # the CLI or an agent, in another process
        stored = engine.evaluate(str(path), str(workspace.root / "double.py"), candidate_path=str(path))
    (lens,) = await lenses(lsp, uri)
    assert lens.command.title.startswith("SAGE: incorrect on the default inputs: output:")
    summary = await execute(lsp, "sage.lastResult", uri)
    assert summary["result"]["attempt_id"] == stored.attempt_id
    assert "refresh" not in workspace.received  # never asked a client that cannot refresh


async def test_benchmark_on_save_is_off_by_default(start_lsp, workspace):
    lsp = await start_lsp(NEOVIM_07)
    uri = open_doc(lsp, workspace.write("kernels/good.py", GOOD))
    _saved(lsp, uri)
    # Notifications are handled in order: a save that queued an evaluation shows as running here.
    summary = await execute(lsp, "sage.lastResult", uri)
    assert summary["running"] is False and summary["result"] is None


async def test_benchmark_on_save_evaluates_the_saved_text_and_shows_it(start_lsp, workspace):
    lsp = await start_lsp(NEOVIM_07, init_options={"benchmarkOnSave": True})
    path = workspace.write("kernels/wrong.py", WRONG)
    uri = open_doc(lsp, path)
    published = asyncio.ensure_future(lsp.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS))
    _saved(lsp, uri)
    assert (await execute(lsp, "sage.lastResult", uri))["running"] is True
    await asyncio.wait_for(published, BOUND_S)
    (diag,) = lsp.diagnostics[uri]
    assert diag.message.startswith("incorrect on the default inputs")
    (lens,) = await lenses(lsp, uri)
    assert diag.message in lens.command.title
    assert (await execute(lsp, "sage.lastResult", uri))["running"] is False


async def test_saves_during_an_evaluation_collapse_into_one_more_of_the_latest_text(start_lsp, workspace):
    lsp = await start_lsp(NEOVIM_07, init_options={"sage": {"benchmarkOnSave": True}})
    path = workspace.write("kernels/good.py", GOOD)
    uri = open_doc(lsp, path)
    _saved(lsp, uri)
    for version, text in ((2, GOOD + "\n# two\n"), (3, WRONG)):
        lsp.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )
        _saved(lsp, uri)

    async def settled() -> dict:
        while (summary := await execute(lsp, "sage.lastResult", uri))["running"]:
            await lsp.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        return summary

    summary = await asyncio.wait_for(settled(), 2 * BOUND_S)
    assert summary["result"]["status"] == "incorrect" and summary["stale"] is False
    with Engine(workspace.config()) as engine:
        # The first save's evaluation, then one for the last save: the middle one was superseded.
        assert [r.status for r in engine.results_for(str(path))] == ["incorrect", "correct"]


async def test_settings_arrive_by_configuration_pull_and_by_push(start_lsp, workspace):
    lsp = await start_lsp("visual-studio-code", configuration={"sage": {"benchmarkOnSave": True}})
    uri = open_doc(lsp, workspace.write("kernels/good.py", GOOD))

    async def pulled() -> types.ConfigurationParams:
        asked = await asyncio.wait_for(workspace.pulls.get(), 10)
        await execute(lsp, "sage.listTasks")  # one round trip: the answer has been applied
        return asked

    assert (await pulled()).items[0].section == "sage"
    # A push with the settings applies them at once: no evaluation is queued on save.
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"sage": {"benchmarkOnSave": False}}))
    _saved(lsp, uri)
    assert (await execute(lsp, "sage.lastResult", uri))["running"] is False
    # An empty push means "ask me": the server pulls again and gets the client's current value.
    lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await pulled()
    _saved(lsp, uri)
    assert (await execute(lsp, "sage.lastResult", uri))["running"] is True


async def test_a_setting_of_the_wrong_type_is_refused_with_a_message_that_says_so(start_lsp, workspace):
    lsp = await start_lsp(NEOVIM_07, init_options={"benchmarkOnSave": "yes"})
    (message,) = lsp.messages
    assert message.type == types.MessageType.Warning
    assert "sage.benchmarkOnSave must be true or false, got 'yes'; keeping false" in message.message


async def test_code_actions_offer_the_lens_commands_for_clients_without_lenses(start_lsp, workspace):
    lsp = await start_lsp("neovim")
    path = workspace.write("kernels/good.py", GOOD)
    uri = open_doc(lsp, path)
    at = types.Range(start=types.Position(line=6, character=4), end=types.Position(line=6, character=4))
    actions = await lsp.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=at, context=types.CodeActionContext(diagnostics=[])
        )
    )
    (action,) = actions
    assert action.title == "SAGE: benchmark vs double.py"
    assert (action.command, list(action.arguments)) == ("sage.benchmark", [uri, 5])
    above = types.Range(start=types.Position(line=1, character=0), end=types.Position(line=1, character=0))
    assert not await lsp.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=above, context=types.CodeActionContext(diagnostics=[])
        )
    )


async def test_emacs_attaches_and_gets_lenses_and_hover(start_lsp, workspace):
    # Neovim's real clients run in test_neovim.py; emacs only by its capabilities.
    lsp = await start_lsp("emacs")
    uri = open_doc(lsp, workspace.write("kernels/good.py", GOOD))
    assert (await lenses(lsp, uri))[0].command.title == "SAGE: benchmark vs double.py"
    hover = await lsp.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=5, character=8))
    )
    assert "`ModelNew` (candidate module)" in hover.contents.value
