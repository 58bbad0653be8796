"""What a server claims from the machine (vllm_repo.serve.claims): ports that another vllm-repo process holds are
never picked nor taken, and the lock files go with their holder."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from vllm_repo.serve import claims, ports
from vllm_repo.serve.errors import LaunchError, TritonServerError

# Another vllm-repo process: holds the ports it is given (or picks and holds some) until its stdin closes.
HOLDER = textwrap.dedent(
    """
    import sys
    from vllm_repo.serve import claims, ports
    given = [int(p) for p in sys.argv[1:]]
    held = [p for p in given if claims.hold_port(p)] if given else ports.free_ports(3, hold=True)
    print(" ".join(map(str, held)), flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_REPO_LOCK_DIR", str(tmp_path / "locks"))
    yield tmp_path / "locks"
    claims.release_ports([p for p, held in list(claims._held_ports.items()) for _ in range(held.count)])


def holder(*held: int) -> tuple[subprocess.Popen, list[int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, *map(str, held)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, [int(p) for p in proc.stdout.readline().split()]


def let_go(proc: subprocess.Popen) -> None:
    proc.communicate(timeout=10)


def test_a_port_another_process_holds_is_never_picked(monkeypatch):
    free = ports.free_ports(2)
    proc, held = holder(free[0])
    try:
        assert held == [free[0]]
        # The only candidate is the held port, free to bind: the pick passes it over every time.
        monkeypatch.setattr(ports, "ports_outside_ephemeral", lambda: [free[0]])
        for _ in range(5):
            assert free[0] not in ports.free_ports(1)
            picked = ports.free_ports(1, hold=True)
            assert free[0] not in picked
            claims.release_ports(picked)
        monkeypatch.setattr(ports, "ports_outside_ephemeral", lambda: [free[0], free[1]])
        assert ports.free_ports(1, hold=True) == [free[1]]
        claims.release_ports([free[1]])
    finally:
        let_go(proc)
    monkeypatch.setattr(ports, "ports_outside_ephemeral", lambda: [free[0]])
    assert ports.free_ports(1, hold=True) == [free[0]]  # its holder is gone, and so is its lock
    claims.release_ports([free[0]])


def test_two_processes_picking_at_once_hold_distinct_ports(monkeypatch):
    # Six candidates for three ports each: picking at random without holding would share some most of the time.
    candidates = ports.free_ports(6)
    monkeypatch.setenv("PYTHONPATH", ":".join(sys.path))
    script = HOLDER.replace(
        "from vllm_repo.serve import claims, ports",
        f"from vllm_repo.serve import claims, ports\nports.ports_outside_ephemeral = lambda: {candidates!r}",
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        picks = [{int(p) for p in proc.stdout.readline().split()} for proc in procs if proc.stdout]
    finally:
        for proc in procs:
            let_go(proc)
    assert [len(p) for p in picks] == [3, 3]
    assert picks[0].isdisjoint(picks[1])


def test_a_given_port_another_process_holds_is_refused_with_what_to_do():
    port = ports.free_ports(1)[0]
    proc, _ = holder(port)
    try:
        with pytest.raises(TritonServerError, match=f"HTTP port {port} is held by another vllm-repo server") as raised:
            claims.hold_ports({"gRPC": ports.free_ports(1)[0], "HTTP": port})
        assert "0 to let vllm-repo pick" in (raised.value.hint or "")
        assert not claims._held_ports  # all or none: the gRPC port was let go
        with pytest.raises(LaunchError, match=f"HTTP port {port} is held by another") as refused:
            ports.check_ports("127.0.0.1", {"HTTP": port})
        assert "--http-port 0" in (refused.value.hint or "")
    finally:
        let_go(proc)


def test_ports_given_as_0_are_picked_and_held_and_the_others_kept():
    given = ports.free_ports(1)[0]
    chosen, picked = ports.pick_ports("127.0.0.1", {"HTTP": 0, "gRPC": given, "metrics": 0})
    try:
        assert chosen["gRPC"] == given and len(picked) == 2 and given not in picked
        assert [chosen["HTTP"], chosen["metrics"]] == picked
        assert all(claims.held_here(p) for p in picked)
    finally:
        claims.release_ports(picked)
    assert not any(claims.held_here(p) for p in picked)


def test_a_port_held_twice_by_one_process_is_one_lock_let_go_with_the_last(lock_dir):
    port = ports.free_ports(1)[0]
    assert claims.hold_port(port) and claims.hold_port(port)
    claims.release_port(port)
    assert claims.held_here(port) and (lock_dir / f"port-{port}.lock").exists()
    claims.release_port(port)
    assert not claims.held_here(port) and not (lock_dir / f"port-{port}.lock").exists()


PYTHON_ENV_HOLDER = textwrap.dedent(
    """
    import sys
    from vllm_repo.serve import claims
    claims.hold_python_env(sys.argv[1])
    print("held", flush=True)
    sys.stdin.read()
    """
)


def test_a_python_env_directory_counts_as_left_behind_only_once_no_live_server_holds_it(tmp_path, monkeypatch):
    monkeypatch.setattr(claims, "PYTHON_ENV_DIRS", str(tmp_path / "python_env_*"))
    old, theirs, mine = (str(tmp_path / f"python_env_{name}") for name in ("old", "theirs", "mine"))
    for path in (old, theirs, mine):
        (tmp_path / path).mkdir()
    before = {old}
    other = subprocess.Popen(
        [sys.executable, "-c", PYTHON_ENV_HOLDER, theirs], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        # Another process's server holds its own: only ours, which no one holds, was left behind.
        assert claims.unclaimed_python_envs(before) == {mine}
        claims.hold_python_env(mine)
        assert claims.unclaimed_python_envs(before) == set()
    finally:
        let_go(other)
    # That process is gone (a killed launch lets go the same way): its directory was left behind.
    assert claims.unclaimed_python_envs(before) == {theirs}
    claims.release_python_env(mine)
    assert claims.unclaimed_python_envs(before) == {theirs, mine}
