"""The published pre-commit hook (.pre-commit-hooks.yaml), driven by the real `pre-commit` tool and a real
`git commit` in a throw-away repository.

pre-commit installs hooks from a git repository at a fixed revision, so the test first snapshots this
checkout's files (tracked plus new, not ignored) into a git repository of its own. The snapshot's path and commit
depend only on the file contents, so pre-commit's hook environment (a virtualenv with vllm-repo pip-installed,
built on the first run) is reused from the cache until the code changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2]
HOOK_ID = "vllm-repo-validate"
# Fixed identity and dates make the snapshot's commit id a function of the files alone.
FIXED_GIT_ENV = {
    "GIT_AUTHOR_NAME": "vllm-repo tests",
    "GIT_AUTHOR_EMAIL": "tests@example.invalid",
    "GIT_COMMITTER_NAME": "vllm-repo tests",
    "GIT_COMMITTER_EMAIL": "tests@example.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
CONFIG = 'backend: "vllm"\n\ninstance_group [\n  {\n    count: 1\n    kind: KIND_MODEL\n  }\n]\n'
GOOD_ARGS = {"model": "facebook/opt-125m", "gpu_memory_utilization": 0.5, "dtype": "bfloat16"}


def cache_dir() -> Path:
    configured = os.environ.get("VLLM_REPO_TEST_CACHE")
    base = (
        Path(configured)
        if configured
        else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vllm-repo" / "tests"
    )
    return base / "pre-commit"


def git_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    # No user or system git config: a global core.hooksPath or commit signing would change what is tested.
    empty = home / "gitconfig"
    empty.touch()
    env.update(
        FIXED_GIT_ENV, GIT_CONFIG_GLOBAL=str(empty), GIT_CONFIG_NOSYSTEM="1", PRE_COMMIT_HOME=str(cache_dir() / "home")
    )
    return env


def git(*args: str, cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=check, capture_output=True, text=True)


def project_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=PROJECT,
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the project is not a git checkout, so there is nothing to snapshot for pre-commit")
    names = sorted({n for n in out.decode().split("\0") if n})
    return [n for n in names if (PROJECT / n).is_file() and not (PROJECT / n).is_symlink()]


def snapshot_project(env: dict[str, str]) -> tuple[Path, str]:
    """A git repository holding this checkout's files in one commit: (path, commit id)."""
    names = project_files()
    assert ".pre-commit-hooks.yaml" in names
    digest = hashlib.sha256()
    for name in names:
        path = PROJECT / name
        digest.update(f"{name}\0{os.access(path, os.X_OK)}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    target = cache_dir() / "sources" / digest.hexdigest()[:16]
    if not (target / ".git").is_dir():
        staging = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        for name in names:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT / name, staging / name)
        git("init", "-q", "-b", "main", cwd=staging, env=env)
        git("add", "-A", cwd=staging, env=env)
        git("commit", "-q", "--no-verify", "-m", "snapshot", cwd=staging, env=env)
        try:
            staging.rename(target)
        except OSError:  # a concurrent run made the same snapshot first
            shutil.rmtree(staging, ignore_errors=True)
    os.utime(target)  # in use: keep it from the pruning below
    rev = git("rev-parse", "HEAD", cwd=target, env=env).stdout.strip()
    return target, rev


def documented_precommit_config() -> str:
    """The .pre-commit-config.yaml block of docs/pre-commit.md."""
    doc = (PROJECT / "docs" / "pre-commit.md").read_text()
    start = doc.index("# .pre-commit-config.yaml\n")
    block = doc[start : doc.index("```", start)]
    assert "<" not in block, "the documented example must work as written, without placeholders"
    assert f"id: {HOOK_ID}" in block
    return block


def pre_commit(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def write_model(repo: Path, engine_args: dict) -> Path:
    model = repo / "deploy" / "model_repository" / "llm"
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "config.pbtxt").write_text(CONFIG)
    path = model / "1" / "model.json"
    path.write_text(json.dumps(engine_args, indent=2) + "\n")
    return path


def commit_count(repo: Path, env: dict[str, str]) -> int:
    done = git("rev-list", "--count", "HEAD", cwd=repo, env=env, check=False)
    return int(done.stdout) if done.returncode == 0 else 0


def test_published_hook_blocks_a_bad_model_json_and_passes_the_fixed_one(tmp_path):
    env = git_env(tmp_path)
    source, _ = snapshot_project(env)

    user = tmp_path / "serving-configs"
    user.mkdir()
    git("init", "-q", "-b", "main", cwd=user, env=env)
    # The documented example as written, with the path of this snapshot for the checkout it names.
    (user / ".pre-commit-config.yaml").write_text(documented_precommit_config().replace("/opt/vllm-repo", str(source)))
    installed = pre_commit("install", cwd=user, env=env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # Build the hook environment outside `git commit` so its duration is visible in the test log.
    started = time.monotonic()
    ready = pre_commit("install-hooks", cwd=user, env=env)
    assert ready.returncode == 0, ready.stdout + ready.stderr
    print(f"pre-commit hook environment ready in {time.monotonic() - started:.1f} s")

    # A commit touching no model file: the hook is skipped, the commit goes through.
    (user / "README.md").write_text("serving configs\n")
    git("add", ".pre-commit-config.yaml", "README.md", cwd=user, env=env)
    first = git("commit", "-m", "start", cwd=user, env=env, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "no files to check" in first.stdout + first.stderr

    # A bad model.json: dtype "bf16" and a misspelled key. The commit is refused and says where and why.
    bad = dict(GOOD_ARGS, dtype="bf16", gpu_memory_utilisation=0.5)
    del bad["gpu_memory_utilization"]
    model_json = write_model(user, bad)
    git("add", "deploy", cwd=user, env=env)
    refused = git("commit", "-m", "add llm", cwd=user, env=env, check=False)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    assert commit_count(user, env) == 1
    assert "Failed" in output and "vllm-repo validate" in output
    assert "model.json" in output
    assert '"bf16"' in output and "bfloat16" in output  # the wrong value and the fix
    assert "gpu_memory_utilisation" in output and "gpu_memory_utilization" in output  # the key and did-you-mean
    assert "vllm" in output.lower() and "0.32.0" in output  # the pinned release from args: was used

    # The fixed file passes, and the commit lands with it.
    write_model(user, GOOD_ARGS)
    git("add", "deploy", cwd=user, env=env)
    accepted = git("commit", "-m", "add llm", cwd=user, env=env, check=False)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "Passed" in accepted.stdout + accepted.stderr
    assert commit_count(user, env) == 2
    committed = git("show", f"HEAD:{model_json.relative_to(user).as_posix()}", cwd=user, env=env).stdout
    assert json.loads(committed)["dtype"] == "bfloat16"

    # A broken config.pbtxt alone (only it is staged) is also found: the hook maps the file to its model.
    (model_json.parent.parent / "config.pbtxt").write_text(CONFIG.replace("count: 1", "count: 1\n    kidn: X"))
    git("add", "deploy", cwd=user, env=env)
    broken = git("commit", "-m", "typo", cwd=user, env=env, check=False)
    assert broken.returncode != 0
    assert "config.pbtxt" in broken.stdout + broken.stderr and "kidn" in broken.stdout + broken.stderr
    assert commit_count(user, env) == 2


@pytest.fixture(autouse=True, scope="module")
def _prune_cache():
    yield
    # Every change to the code makes a new snapshot and hook environment (~250 MB): drop the environments no
    # live configuration uses any more, and snapshots unused for an hour (pre-commit keeps its own clone, and an
    # unchanged checkout recreates the same snapshot, path and commit).
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["PRE_COMMIT_HOME"] = str(cache_dir() / "home")
    subprocess.run([sys.executable, "-m", "pre_commit", "gc"], env=env, capture_output=True, check=False)
    for old in (cache_dir() / "sources").glob("*"):
        if time.time() - old.stat().st_mtime > 3600:
            shutil.rmtree(old, ignore_errors=True)
