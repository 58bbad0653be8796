"""Fixtures for the schema tests: the serving environment's interpreter (real vLLM), when there is one."""

from __future__ import annotations

import pytest

from tests.support.serving import SERVING_PYTHON


@pytest.fixture
def serving_python() -> str:
    assert SERVING_PYTHON
    return SERVING_PYTHON
