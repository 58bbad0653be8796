"""What every test folder may use: the fixtures of tests/support/fixtures.py. Helpers that tests share are in
tests/support/ and imported from there; no test module imports another.

Run in parallel (pytest-xdist, ``-n 2 --dist loadgroup``, as scripts/test.sh does), the tests that start servers
go in two groups, each on one worker, in file order, both started first (xdist hands out the largest first): a
module's or the session's server, started once, serves the tests of its folder. Their checks that a stopped server
left nothing behind count only what is theirs: each worker has a temporary directory of its own (work directories,
vLLM's sockets), a /dev/shm segment counts only when no live process maps it, and a python_env directory only when
no live server holds it (claims.py). The other tests spread over the workers once a group is done."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.serving import SERVING_SKIP_REASON

pytest_plugins = ["tests.support.fixtures"]

# The xdist groups of the tests that start servers: the end-to-end tests and the others that need the serving
# environment (Triton and vLLM; a launch that fails to load a model, say). Each folder's go in one group (its
# session servers are started once); the folders below in the second, about half of the time.
SERVING_GROUP = "serving"
SECOND_SERVING_GROUP = "serving-2"
SECOND_GROUP_FOLDERS = ("backend", "benchmark", "openai")
# Where a worker's own temporary directory is kept (pytest_configure).
_OWN_TMPDIR = pytest.StashKey[Path]()


def starts_servers(item: pytest.Item) -> bool:
    return item.get_closest_marker("e2e") is not None or any(
        mark.kwargs.get("reason") == SERVING_SKIP_REASON for mark in item.iter_markers("skipif")
    )


def pytest_itemcollected(item: pytest.Item) -> None:
    # As each test is collected: xdist reads the groups in its pytest_collection_modifyitems, after collection.
    if starts_servers(item) and not item.get_closest_marker("xdist_group"):
        folder = item.path.parent.name
        item.add_marker(
            pytest.mark.xdist_group(SECOND_SERVING_GROUP if folder in SECOND_GROUP_FOLDERS else SERVING_GROUP)
        )


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


def pytest_configure(config: pytest.Config) -> None:
    """Each xdist worker gets a temporary directory of its own (TMPDIR, for it and the servers it starts): the checks
    that a stopped server left no work directory or IPC socket count what appeared in it, never the other worker's."""
    worker, run = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:8]
    if worker and run:
        own = Path(tempfile.gettempdir()) / f"vllm-repo-tests-{run}-{worker}"
        own.mkdir(exist_ok=True)
        os.environ["TMPDIR"] = str(own)
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again
        config.stash[_OWN_TMPDIR] = own


def pytest_unconfigure(config: pytest.Config) -> None:
    own = config.stash.get(_OWN_TMPDIR, None)
    if own is not None:
        shutil.rmtree(own, ignore_errors=True)
