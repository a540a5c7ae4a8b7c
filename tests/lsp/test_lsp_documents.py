"""What the language server caches between requests: kernels per document
version, results per memory change stamp (real SQLite, two Engines as two
processes would hold them)."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types
from pygls.workspace import TextDocument

from sage_engine import kernels as kernel_finder
from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.models import Adoption, NewItem
from sage_mcp.lsp.documents import DocumentCache, ResultCache

from tests.support.engine import make_result
from tests.lsp.support import GOOD

LIMIT = 400_000


def _spy_on_find_kernels(monkeypatch) -> list[int]:
    """Count calls of the real kernel finder (it still does the work)."""
    calls: list[int] = []
    real = kernel_finder.find_kernels

    def counting(text, *args, **kwargs):
        calls.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(kernel_finder, "find_kernels", counting)
    return calls


def test_a_document_is_analysed_once_per_version(monkeypatch):
    calls = _spy_on_find_kernels(monkeypatch)
    cache = DocumentCache()
    doc = TextDocument("file:///k.py", GOOD, version=1, language_id="python")
    first = cache.analyse(doc, LIMIT)
    assert [k.name for k in first.kernels] == ["ModelNew"]
    for _ in range(5):  # lens, hover, code action, the idle check...
        assert cache.analyse(doc, LIMIT) is first
    assert calls == [len(GOOD)]

    doc.apply_change(types.TextDocumentContentChangeWholeDocument(text=GOOD + "\n# edit\n"))
    doc.version = 2
    second = cache.analyse(doc, LIMIT)
    assert second is not first and second.digest != first.digest and len(calls) == 2


def test_a_file_over_the_candidate_limit_is_never_parsed(monkeypatch):
    calls = _spy_on_find_kernels(monkeypatch)
    big = GOOD + "x = 1\n" * 100_000
    analysis = DocumentCache().analyse(TextDocument("file:///big.py", big, version=1, language_id="python"), LIMIT)
    assert analysis.too_large and analysis.kernels == () and calls == []


def test_a_large_file_under_the_limit_is_scanned_by_lines_not_parsed():
    body = "".join(f"def helper_{n}(x):\n    return x * {n}\n" for n in range(5_000))
    text = GOOD + body
    assert len(text) > kernel_finder.PARSE_MAX_CHARS
    assert [k.name for k in kernel_finder.find_kernels(text)] == ["ModelNew"]
    # A string is text, not code, to the parser; the line scanner cannot tell.
    in_string = 'DOC = """\nclass ModelNew:\n"""\n'
    assert kernel_finder.find_kernels(in_string) == []
    assert [k.name for k in kernel_finder.find_kernels(in_string, parse_max_chars=10)] == ["ModelNew"]


def test_results_are_re_read_only_when_another_process_stores_something(tmp_path: Path):
    config = Config(db_path=tmp_path / "memory.db", auto_consolidate_every=0)
    path = str(tmp_path / "k.py")
    with Engine(config) as editor, Engine(config) as agent:
        cache = ResultCache(lambda: editor)
        stamp = cache.check()
        assert cache.last_result(path) is None
        for _ in range(3):
            assert cache.check() == stamp and cache.last_result(path) is None
        assert cache.reads == 1

        stored = agent.record_result(make_result("incorrect"), candidate_path=path)
        assert cache.check() != stamp
        assert cache.last_result(path).attempt_id == stored.attempt_id and cache.reads == 2


def test_adoption_counts_are_re_read_while_the_episode_is_open_and_kept_once_it_closes(tmp_path: Path):
    # An adoption changes the lens ("1 rule adopted") without a new attempt, so without moving the stamp.
    config = Config(db_path=tmp_path / "memory.db", auto_consolidate_every=0)
    path = str(tmp_path / "k.py")
    with Engine(config) as editor, Engine(config) as agent:
        cache = ResultCache(lambda: editor)
        item = agent.add_item(NewItem(title="fuse it", content="one pass")).item
        episode = agent.retrieve("fuse it").episode_id
        attempt = agent.record_result(make_result("correct"), episode_id=episode, candidate_path=path)
        stamp = cache.check()
        assert cache.adopted_count(cache.last_result(path)) == 0
        assert cache.adopted_count(cache.last_result(path)) == 0 and cache.episode_reads == 1  # one read per request

        agent.record_adoption(episode, [Adoption(id=item.id, evidence="used")], attempt_id=attempt.attempt_id, close=False)
        assert cache.check() == stamp and cache.adopted_count(cache.last_result(path)) == 1

        agent.close_episode(episode)
        assert cache.check() == stamp and cache.adopted_count(cache.last_result(path)) == 1
        reads = cache.episode_reads
        for _ in range(3):
            assert cache.check() == stamp and cache.adopted_count(cache.last_result(path)) == 1
        assert cache.episode_reads == reads  # closed: no adoption can be added, nothing is read again
