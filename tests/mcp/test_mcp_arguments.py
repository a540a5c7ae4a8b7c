"""How a schema violation is worded, without a server: the limits come from
the JSON schema the client was given."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sage_mcp.mcp.arguments import describe


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int
    weight: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0


class Arguments(BaseModel):
    name: str
    count: Annotated[int | None, Field(ge=1, lt=2**63)] = None
    mode: Literal["fast", "full"] = "fast"
    items: list[Item] = []


def worded(**arguments) -> str:
    with pytest.raises(ValidationError) as caught:
        Arguments.model_validate(arguments)
    return describe(caught.value, Arguments.model_json_schema())


def test_an_exclusive_integer_limit_is_quoted_as_the_last_value_allowed():
    assert worded(name="n", count=0) == "count must be between 1 and 9223372036854775807; got 0"


def test_nested_values_are_named_by_their_path_and_every_problem_is_said():
    assert worded(name="n", items=[{"id": 1, "weight": 0}, {"idd": 2}]) == (
        "items[0].weight must be greater than 0 and at most 1; got 0. items[1].id is required. "
        "items[1] has no field 'idd'; its fields are id, weight"
    )


def test_a_long_rejected_value_is_not_repeated_back():
    message = worded(name="n", count="x" * 5000)
    assert message == "count must be an integer between 1 and 9223372036854775807; got a string of 5000 characters"


def test_choices_and_missing_values_are_said_plainly():
    assert worded(mode="slow") == "name is required. mode must be one of 'fast' or 'full'; got \"slow\""
