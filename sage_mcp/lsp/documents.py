"""What the language server knows about the open documents (`Documents`:
each one's kernels, file, task and last stored result), and what it
remembers between requests so that a request costs what changed since the
last one and no more:

- `DocumentCache`: each open document's kernels and content hash, computed
  once per document version (a lens, a hover and the idle check all reuse
  them), and nothing at all for a file over the candidate size limit;
- `ResultCache`: the last stored result per candidate path, re-read only when
  the memory's change stamp (`Engine.results_version`, the newest attempt)
  moves, whichever process stored the new result. Adoptions do not move that
  stamp, but they can only be recorded while an episode is open: an attempt's
  adoption count is kept for good once its episode is closed and re-read on
  each request while it is open.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pygls.uris import to_fs_path
from pygls.workspace import TextDocument, Workspace

from sage_engine import kernels as kernel_finder
from sage_engine.engine import Engine
from sage_engine.errors import InvalidInput, NotFound
from sage_engine.kernels import Kernel, TaskLink
from sage_engine.models import EvalResult
from sage_mcp.lsp import views

KERNEL_LANGUAGES = {"python", "cpp", "c"}


def language_of(doc: TextDocument) -> str:
    return doc.language_id or ("python" if doc.uri.endswith(".py") else "cpp")


@dataclass(frozen=True)
class Analysis:
    """One version of one document, as far as SAGE cares."""

    version: int | None
    source: str  # the text analysed; compared by identity to notice an unversioned change
    kernels: tuple[Kernel, ...]
    digest: str  # views.content_hash(source), the harness's candidate_hash
    too_large: bool  # over Config.max_candidate_chars: no kernels, nothing to benchmark

    @property
    def chars(self) -> int:
        return len(self.source)


class DocumentCache:
    """Per-document analysis, kept until the document's version changes."""

    def __init__(self) -> None:
        self._by_uri: dict[str, Analysis] = {}
        self.analysed = 0  # how many times a document was actually analysed (not served from cache)

    def analyse(self, doc: TextDocument, max_chars: int) -> Analysis:
        source = doc.source
        cached = self._by_uri.get(doc.uri)
        if cached is not None and cached.version == doc.version and cached.source is source:
            return cached
        too_large = len(source) > max_chars
        if too_large or (doc.language_id and doc.language_id not in KERNEL_LANGUAGES):
            kernels: tuple[Kernel, ...] = ()
        else:
            kernels = tuple(kernel_finder.find_kernels(source, language_of(doc)))
        digest = "" if too_large else views.content_hash(source)
        analysis = Analysis(doc.version, source, kernels, digest, too_large)
        self._by_uri[doc.uri] = analysis
        self.analysed += 1
        return analysis

    def forget(self, uri: str) -> None:
        self._by_uri.pop(uri, None)


class ResultCache:
    """Stored results for candidate paths, valid while the memory's change
    stamp stays the same. `check()` costs one small query; it is called once
    per request, so a result stored by the CLI or an agent shows up on the
    client's next request even when the client cannot be asked to refresh."""

    def __init__(self, engine: Callable[[], Engine]):
        self._engine = engine
        self.stamp: int | None = None
        self._last: dict[str, EvalResult | None] = {}
        self._adopted: dict[int, int] = {}  # attempt id -> adopted items, final (its episode is closed)
        self._open: dict[int, int] = {}  # the same while the episode is open, until the next check()
        self.reads = 0  # how many times a path's result was read from the memory
        self.episode_reads = 0  # how many times an episode was read for its adoptions

    def check(self) -> int:
        """The memory's current stamp; forgets everything cached if it moved,
        and the adoption counts of open episodes in any case."""
        stamp = self._engine().results_version()
        if stamp != self.stamp:
            self.stamp = stamp
            self._last.clear()
            self._adopted.clear()
        self._open.clear()
        return stamp

    def last_result(self, path: str) -> EvalResult | None:
        if path not in self._last:
            self.reads += 1
            self._last[path] = self._engine().last_result(path)
        return self._last[path]

    def adopted_count(self, result: EvalResult) -> int:
        """How many items were adopted with this attempt."""
        attempt = result.attempt_id
        if result.episode_id is None or attempt is None:
            return 0
        if attempt in self._adopted:
            return self._adopted[attempt]
        if attempt in self._open:
            return self._open[attempt]
        self.episode_reads += 1
        try:
            episode = self._engine().get_episode(result.episode_id)
        except NotFound:
            self._adopted[attempt] = 0
            return 0
        count = next((len(a.adopted_ids) for a in episode.attempt_list if a.id == attempt), 0)
        (self._adopted if episode.status == "closed" else self._open)[attempt] = count
        return count


class Documents:
    """What SAGE knows about an open document: its analysis (kernels, hash),
    its file, the task it implements and its file's last stored result."""

    def __init__(self, engine: Callable[[], Engine], workspace: Callable[[], Workspace]):
        self._engine = engine
        self._workspace = workspace  # pygls makes a new one at `initialize`
        self.cache = DocumentCache()
        self.results = ResultCache(engine)

    def get(self, uri: str) -> TextDocument:
        if not isinstance(uri, str) or not uri:
            raise InvalidInput("pass the document URI as the first argument")
        workspace = self._workspace()
        if uri not in workspace.text_documents:
            # Not open: only a file on disk can be read (an editor's Output
            # panel or a settings view has a URI too, and nothing to evaluate).
            path = to_fs_path(uri) if uri.startswith("file:") else None
            if path is None or not Path(path).is_file():
                raise NotFound(f"{uri} is neither an open document nor a file: SAGE reads kernels from files")
        return workspace.get_text_document(uri)

    @staticmethod
    def path_of(doc: TextDocument) -> str | None:
        path = to_fs_path(doc.uri) if doc.uri.startswith("file:") else None
        return str(Path(path).resolve()) if path else None

    @staticmethod
    def name_of(doc: TextDocument) -> str:
        return Path(Documents.path_of(doc) or doc.uri).name

    def analysis(self, doc: TextDocument) -> Analysis:
        return self.cache.analyse(doc, self._engine().config.max_candidate_chars)

    def kernels(self, doc: TextDocument) -> list[Kernel]:
        return list(self.analysis(doc).kernels)

    def task_of(self, doc: TextDocument) -> TaskLink | None:
        path = self.path_of(doc)
        if path is None:
            found = kernel_finder.header_task(doc.source)
            return TaskLink(found[0], "header", doc.uri, found[1]) if found else None
        root = self._workspace().root_path
        return kernel_finder.find_task(Path(path), doc.source, stop_at=Path(root) if root else None)

    def require_task(self, doc: TextDocument) -> TaskLink:
        link = self.task_of(doc)
        if link is None:
            raise InvalidInput(
                f"no task set for {self.name_of(doc)}: add '# sage: task=<task id or path>' "
                "at the top, map it in .sage/tasks.json, or run 'SAGE: Set task for this file'"
            )
        return link

    def last_result(self, doc: TextDocument) -> EvalResult | None:
        """The newest stored result for the document's file, as of the last `results.check()`."""
        path = self.path_of(doc)
        return self.results.last_result(path) if path else None

    def is_stale(self, doc: TextDocument, result: EvalResult) -> bool:
        return result.candidate_hash != self.analysis(doc).digest
