"""What every test folder may use: the fixtures of tests/support/fixtures.py. Helpers that tests share are in
tests/support/ and imported from there; no test module imports another.

Run in parallel (pytest-xdist, ``-n 2 --dist loadgroup``, as scripts/test.sh does), the tests that start servers
stay on one worker, in file order: their checks that a stopped server left nothing behind look at the whole machine
(its /dev/shm, the Python backend's /tmp/python_env_* directories), where another server starting meanwhile would be
counted; and a module's or the session's server, started once, serves the tests that share it. The other tests
spread over the workers."""

from __future__ import annotations

import pytest

from tests.support.serving import SERVING_SKIP_REASON

pytest_plugins = ["tests.support.fixtures"]

# The xdist group of the tests that start servers: the end-to-end tests and the others that need the serving
# environment (Triton and vLLM; a launch that fails to load a model, say). One worker runs them all, in file order.
SERVING_GROUP = "serving"


def starts_servers(item: pytest.Item) -> bool:
    return item.get_closest_marker("e2e") is not None or any(
        mark.kwargs.get("reason") == SERVING_SKIP_REASON for mark in item.iter_markers("skipif")
    )


def pytest_itemcollected(item: pytest.Item) -> None:
    # As each test is collected: xdist reads the groups in its pytest_collection_modifyitems, after collection.
    if starts_servers(item) and not item.get_closest_marker("xdist_group"):
        item.add_marker(pytest.mark.xdist_group(SERVING_GROUP))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A worker of ``--dist loadgroup`` tells the scheduler a test's group by the suffix ``@group`` of its node id.
    pytest-xdist (3.8) adds it by setting ``Item._nodeid``, which pytest 9 no longer reads (the id is ``Item._id``):
    without this, the groups are ignored and tests that must share a worker are spread over all of them."""
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # pytest 8: xdist's own suffix works
        return

    for item in items:
        names = sorted(
            {
                str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                for mark in item.iter_markers("xdist_group")
            }
        )
        if names and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")
