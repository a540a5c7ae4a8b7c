"""Checks on what callers store: text limits, scopes, tags. Pure functions;
each refusal says what to fix."""

from __future__ import annotations

import re

from sage_engine.config import Config
from sage_engine.errors import InvalidInput
from sage_engine.models import NewItem

# team: everyone on this memory; private: only its author; project:NAME: the
# team, when working in that project. 'global' is the older name of 'team'.
_SCOPE = re.compile(r"^(team|private|project:[A-Za-z0-9][A-Za-z0-9_.\-/]{0,99})$")
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+\-]{0,63}$")
MAX_TAGS = 32
# operator, family, backend, hardware: on items, and on the episodes whose
# lessons become items, so one limit for both (a longer label an episode
# accepted would make its lesson refused).
LABEL_CHARS = 200


def check_scope(scope: str | None) -> str:
    if scope in (None, "", "global"):
        return "team"
    if not _SCOPE.match(scope):
        raise InvalidInput(
            f"invalid scope {scope!r}: use 'team' (the default), 'private' or 'project:NAME' "
            "(letters, digits, _ . - /, up to 100 characters)"
        )
    return scope


def check_text(name: str, value: str | None, limit: int, *, required: bool) -> str | None:
    if value is None or not value.strip():
        if required:
            raise InvalidInput(f"{name} must not be empty")
        return None
    if "\x00" in value:
        raise InvalidInput(f"{name} contains a NUL byte; send plain text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{name} is not valid Unicode text (lone surrogate at position {exc.start}); send UTF-8 text") from exc
    if len(value) > limit:
        raise InvalidInput(f"{name} is {len(value)} characters; the limit is {limit}. Shorten it")
    return value


def check_tags(tags: list[str]) -> list[str]:
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"{len(tags)} tags given; at most {MAX_TAGS}")
    bad = [t for t in tags if not _TAG.match(t)]
    if bad:
        raise InvalidInput(f"invalid tags {bad[:3]}: tags are 1-64 characters of letters, digits and _ . : + -")
    return sorted(set(tags))


def validate(new: NewItem, config: Config) -> NewItem:
    check_text("title", new.title, config.max_title_chars, required=True)
    check_text("content", new.content, config.max_content_chars, required=True)
    check_text("code", new.code, config.max_code_chars, required=False)
    scope = check_scope(new.scope)
    for name in ("operator", "family", "backend", "hardware"):
        check_text(name, getattr(new, name), LABEL_CHARS, required=False)
    if not -1.0 <= new.utility <= 2.0:
        raise InvalidInput("utility must lie in [-1, 2]")
    return new.model_copy(update={"tags": check_tags(new.tags), "scope": scope})
