from sage_engine.config import Config
from sage_engine.memory.retrieval import Candidate, Filters, exploration_bonus, rank


def cand(i, bm25=1.0, utility=0.0, n=0, **kw):
    base = dict(status="active", scope="team", author=None, backend=None, hardware=None, adoption_rate=0.0)
    base.update(kw)
    return Candidate(id=i, bm25=bm25, utility=utility, n_retrieved=n, **base)


def test_useful_items_outrank_equally_similar_useless_ones():
    r = rank([cand(1, utility=-0.2), cand(2, utility=0.6)], Filters(), 5, 10, Config())
    assert [x.id for x in r.items] == [2, 1]


def test_filters_report_what_they_removed_and_why():
    cands = [
        cand(1),
        cand(2, status="quarantined"),
        cand(3, scope="project:other"),
        cand(4, backend="cuda"),
        cand(5, hardware="Ascend910B4"),
        cand(6, bm25=0.001),
        cand(7, status="resident"),
    ]
    r = rank(cands, Filters(backend="npu", hardware="Ascend910B3"), 5, 0, Config())
    assert [x.id for x in r.items] == [1]
    assert r.filtered_out == {"quarantined": 1, "scope": 1, "backend": 1, "hardware": 1, "low_similarity": 1}


def test_output_is_bounded_by_k_and_the_rest_is_counted():
    r = rank([cand(i) for i in range(1, 21)], Filters(), 3, 0, Config())
    assert len(r.items) == 3 and r.filtered_out["below_top_k"] == 17


def test_rarely_shown_items_get_a_larger_exploration_bonus():
    assert exploration_bonus(0, 100, 0.2) > exploration_bonus(50, 100, 0.2) > 0
    r = rank([cand(1, n=500), cand(2, n=0)], Filters(), 2, 1000, Config(exploration_c=0.3))
    assert r.items[0].id == 2


def test_a_private_item_passes_the_filter_only_for_its_author():
    private = [cand(1, scope="private", author="alice"), cand(2)]
    assert [r.id for r in rank(private, Filters(viewer="alice"), 5, 0, Config()).items] == [1, 2]
    bob = rank(private, Filters(viewer="bob"), 5, 0, Config())
    # Not even counted: filtered_out must not tell bob that a private item matched.
    assert [r.id for r in bob.items] == [2] and bob.filtered_out == {}
