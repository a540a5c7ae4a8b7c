"""Parsing from two threads at once: the engine's parse cannot be tripped by
another thread's (CPython 3.11 shares the AST builder's depth count between
threads, and a suite check with two jobs failed on it)."""

from __future__ import annotations

import ast
import gc
import threading
from pathlib import Path

from sage_engine import syntax

SOURCE = "\n".join(f"def f{i}(x):\n    return [x + {i} for _ in range(3)]" for i in range(50))
PAUSE_AT = 5  # the garbage collector's fifth start in a parse: inside building the tree


def test_a_parse_paused_midway_is_not_tripped_by_another_threads_parse():
    """The first thread is held inside its parse (by a garbage-collector
    callback) until the second has started building its own tree, and the
    second is held there until the first is done: without the lock this fails
    every time ("AST constructor recursion depth mismatch")."""
    first_paused, second_inside, first_done = threading.Event(), threading.Event(), threading.Event()
    idents: dict[str, int] = {}
    parsing: set[int] = set()  # threads inside their parse: only their collections count
    starts: dict[int, int] = {}

    def hold(phase: str, info: dict) -> None:
        if phase != "start":
            return
        me = threading.get_ident()
        if me not in parsing:
            return
        starts[me] = starts.get(me, 0) + 1
        if starts[me] != PAUSE_AT:
            return
        if me == idents.get("first"):
            first_paused.set()
            second_inside.wait(1.0)  # with the lock the second never gets inside: go on after a second
        elif me == idents.get("second"):
            second_inside.set()
            first_done.wait(1.0)

    errors: list[str] = []
    trees = []

    def parse(role: str) -> None:
        idents[role] = threading.get_ident()
        try:
            if role == "second":
                assert first_paused.wait(10.0), "the first parse never paused"
            parsing.add(threading.get_ident())
            trees.append(syntax.parse(SOURCE))
        except (SystemError, AssertionError) as exc:
            errors.append(f"{role}: {exc}")
        finally:
            if role == "first":
                first_done.set()

    threshold = gc.get_threshold()
    gc.set_threshold(1)
    gc.callbacks.append(hold)
    try:
        threads = [threading.Thread(target=parse, args=(role,)) for role in ("first", "second")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.callbacks.remove(hold)
        gc.set_threshold(*threshold)
    assert errors == []
    assert len(trees) == 2 and all(len(tree.body) == 50 for tree in trees)


def test_literal_eval_goes_through_the_same_lock():
    assert syntax.literal_eval("[1, (2, 3)]") == [1, (2, 3)]


def test_the_engine_and_its_surfaces_parse_only_through_syntax():
    root = Path(__file__).resolve().parents[1]
    direct = []
    for path in sorted([*root.glob("sage_engine/**/*.py"), *root.glob("sage_mcp/**/*.py")]):
        if path.name == "syntax.py" and path.parent.name == "sage_engine":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ast":
                if node.attr in ("parse", "literal_eval"):
                    direct.append(f"{path.relative_to(root)}:{node.lineno}: ast.{node.attr}")
    assert direct == [], "parse through sage_engine.syntax, which one thread at a time can use"
