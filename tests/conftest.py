"""What every test folder may use: the fixtures of tests/support/fixtures.py. Helpers that tests share are in
tests/support/ and imported from there; no test module imports another.

Run in parallel (pytest-xdist, ``-n 2 --dist loadgroup``, as scripts/test.sh does), the end-to-end tests stay on one
worker, in file order: their checks that a stopped server left nothing behind look at the whole machine (its
/dev/shm, the Python backend's /tmp/python_env_* directories), where another server starting meanwhile would be
counted; and a module's server, started once, serves the module's tests. The other tests spread over the workers."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.support.fixtures"]

# The xdist group of every end-to-end test (one worker runs them all, one after another).
E2E_GROUP = "e2e"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(E2E_GROUP))
