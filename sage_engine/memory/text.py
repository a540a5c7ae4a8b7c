"""Text helpers shared by retrieval, dedup and clustering: tokenising,
approximate token counts and a cheap lexical similarity."""

from __future__ import annotations

import math
import re
from collections import Counter

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?")

STOPWORDS = frozenset(
    """a an and are as at be but by for from has have if in into is it its of on or so
    such that the their then there these this to was were will with when which while
    use using used can may should must not no do does than only also all any each via
    def class self return import torch nn model get inputs init forward
    one two per over more less most very just like same other""".split()
)


def words(text: str) -> list[str]:
    """Lower-cased words with underscores split, so `tl.load` and `load` meet."""
    out: list[str] = []
    for w in _WORD.findall(text):
        for part in w.lower().split("_"):
            if part and part not in STOPWORDS:
                out.append(_stem(part))
    return out


def _stem(w: str) -> str:
    # A crude suffix strip is enough to make "overflows"/"overflow" and
    # "kernels"/"kernel" meet for dedup; FTS5 has its own porter stemmer.
    for suffix in ("ing", "es", "s"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def approx_tokens(text: str) -> int:
    """About four characters a token: cheap and close enough for budgets."""
    return max(1, math.ceil(len(text) / 4))


def similarity(a: str, b: str) -> float:
    """Cosine similarity of word-count vectors (unigrams plus bigrams, so
    paraphrases that reorder words still score lower than true duplicates)."""
    va, vb = _vector(a), _vector(b)
    if not va or not vb:
        return 0.0
    dot = sum(c * vb.get(t, 0) for t, c in va.items())
    na = math.sqrt(sum(c * c for c in va.values()))
    nb = math.sqrt(sum(c * c for c in vb.values()))
    return dot / (na * nb)


def _vector(text: str) -> Counter[str]:
    ws = words(text)
    vec = Counter(ws)
    vec.update(f"{x} {y}" for x, y in zip(ws, ws[1:]))
    return vec


def query_terms(text: str, max_terms: int = 32) -> list[str]:
    """The distinct search words of `text`, in order: what lexical search
    matches on (each store quotes them in its own query syntax)."""
    seen: dict[str, None] = {}
    for w in _WORD.findall(text):
        for part in w.lower().split("_"):
            if len(part) > 1 and part not in STOPWORDS:
                seen.setdefault(part, None)
        if len(seen) >= max_terms:
            break
    return list(seen)[:max_terms]


def one_line(text: str) -> str:
    """Text as one line: whatever its line breaks, it cannot start a line of its own."""
    return " ".join(text.split())


def fenced(text: str, info: str = "text") -> str:
    """`text` in a code fence longer than any backtick run inside it, so it
    stays quoted data: it cannot close the fence and make headings or lines
    of its own."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"
