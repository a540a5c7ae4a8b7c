"""The memory suite runs on both stores."""

import pytest

from tests.support.postgres import STORES


@pytest.fixture(params=STORES)
def store_kind(request) -> str:
    return request.param
