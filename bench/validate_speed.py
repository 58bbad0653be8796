"""How long a cold `vllm-repo validate` takes: a fresh process per run, the installed console script.

    python -m bench.validate_speed [--runs 15] [--script PATH] [--profile] [--ratio-only]

Cases: one model (the official sample layout), the same model named by its files (the way pre-commit calls the
hook), and a generated repository of 200 models (mixed settings: LoRA, pinned GPUs, parallelism, parameters).
Prints median and p90 wall time per case against the targets (median <= 0.30 s for one model and <= 1.0 s for
200 models on a 2-core machine), and which heavy modules the command imported. --profile adds the slowest imports
from `python -X importtime`. The first run of each case is a discarded warm-up (byte-code and page cache), so the
figures are what a user sees from the second commit on.

The cold start is also given as a ratio to a bare `python -c "import typer"` in the same interpreter, the two run
alternately so that both see the same machine: a figure that holds across machines of different speeds (target:
at most 2.5x).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VERSION = "0.32.0"
RATIO_TARGET = 2.5
TARGETS = {"one model": 0.30, "one model, files (pre-commit)": 0.30, "200-model repository": 1.0}
HEAVY_MODULES = (
    "vllm",
    "torch",
    "grpc",
    "tritonclient.grpc",
    "tritonclient.http",
    "numpy",
    "huggingface_hub",
    "jsonschema",
    "transformers",
    "aiohttp",
)

CONFIG = """\
backend: "vllm"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
instance_group [ {{ count: 1 kind: {kind}{gpus} }} ]
parameters {{ key: "REPORT_CUSTOM_METRICS" value: {{ string_value: "{metrics}" }} }}
"""


def write_model(repo: Path, index: int) -> Path:
    """Model number `index`: every few models differ in the settings the rules look at."""
    name = f"llm_{index:03d}"
    model = repo / name
    (model / "1").mkdir(parents=True)
    pinned = index % 4 == 0
    (model / "config.pbtxt").write_text(
        CONFIG.format(
            kind="KIND_GPU" if pinned else "KIND_MODEL",
            gpus=f" gpus: [ {index % 8} ]" if pinned else "",
            metrics="true" if index % 3 == 0 else "false",
        )
    )
    args = {
        "model": f"org/model-{index}",
        "gpu_memory_utilization": 0.1 + (index % 8) / 10,
        "max_model_len": 4096 * (1 + index % 4),
        "dtype": ["auto", "bfloat16", "float16"][index % 3],
        "tensor_parallel_size": 1 if pinned else 1 + index % 2,
        "enforce_eager": index % 2 == 0,
        "disable_log_stats": index % 5 == 0,
    }
    if index % 7 == 0:
        args["enable_lora"] = True
        (model / "1" / "multi_lora.json").write_text(json.dumps({"sql": "org/sql-lora", "chat": f"/loras/{index}"}))
    if index % 11 == 0:
        args["dtype"] = "bf16"  # a real finding now and then, so the reporters have work to do
    (model / "1" / "model.json").write_text(json.dumps(args, indent=2))
    return model


def build_cases(root: Path) -> dict[str, list[str]]:
    one = root / "one" / "model_repository"
    model = write_model(one, 0)
    many = root / "many" / "model_repository"
    for index in range(200):
        write_model(many, index)
    return {
        "one model": [str(one)],
        "one model, files (pre-commit)": [str(model / "config.pbtxt"), str(model / "1" / "model.json")],
        "200-model repository": [str(many)],
    }


def default_script() -> Path:
    candidates = [
        Path(sys.executable).with_name("vllm-repo"),
        Path(__file__).resolve().parents[1] / ".venv" / "bin" / "vllm-repo",
    ]
    found = shutil.which("vllm-repo")
    candidates += [Path(found)] if found else []
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    sys.exit("vllm-repo console script not found; pip install -e . or pass --script")


def time_runs(script: Path, paths: list[str], runs: int) -> tuple[list[float], list[float]]:
    """Wall times and CPU times (user + system) of `runs` fresh processes. On a busy machine the wall time
    includes waiting for a core; the CPU time is what the command itself costs."""
    command = [str(script), "validate", "--vllm-version", VERSION, *paths]
    walls, cpus = [], []
    for attempt in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode not in (0, 1):
            sys.exit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}")
        if attempt:  # the first run warms byte-code and page caches
            walls.append(elapsed)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


# A typer app with validate's parameters whose command does nothing: what typer itself costs once a command runs
# (typer 0.2x coerces every parameter through pydantic), the floor under any typer CLI's start-up.
TYPER_FLOOR = """
from pathlib import Path
from typing import Annotated
import typer
app = typer.Typer()
@app.callback()
def root(debug: Annotated[bool, typer.Option("--debug")] = False): pass
@app.command()
def validate(paths: Annotated[list[Path], typer.Argument()],
             vllm_version: Annotated[str | None, typer.Option("--vllm-version")] = None,
             fmt: Annotated[str, typer.Option("--format")] = "text",
             strict: Annotated[bool, typer.Option("--strict")] = False,
             gpu: Annotated[str | None, typer.Option("--gpu")] = None,
             select: Annotated[list[str] | None, typer.Option("--select")] = None,
             ignore: Annotated[list[str] | None, typer.Option("--ignore")] = None): pass
app()
"""


def startup_ratio(script: Path, paths: list[str], runs: int) -> dict[str, float]:
    """Median wall times of validate, of a bare `import typer` and of TYPER_FLOOR, run alternately."""
    validate = [str(script), "validate", "--vllm-version", VERSION, *paths]
    bare = [python_of(script), "-c", "import typer"]
    floor = [python_of(script), "-c", TYPER_FLOOR, "validate", "--vllm-version", VERSION, *paths]
    times: dict[str, list[float]] = {"validate": [], "bare": [], "floor": []}
    for attempt in range(runs + 1):
        for label, command in (("bare", bare), ("floor", floor), ("validate", validate)):
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True)
            elapsed = time.perf_counter() - started
            if done.returncode not in (0, 1):
                sys.exit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}")
            if attempt:
                times[label].append(elapsed)
    return {label: statistics.median(values) for label, values in times.items()}


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-9 * len(ordered) // 10) - 1)]  # nearest rank


def python_of(script: Path) -> str:
    first = script.read_text(errors="replace").splitlines()[0]
    return first[2:].strip() if first.startswith("#!") else sys.executable


def imported_modules(script: Path, paths: list[str]) -> list[str]:
    """Which heavy modules a validate run imports, from inside the same interpreter the script uses."""
    probe = (
        "import sys\n"
        "from vllm_repo.cli import main\n"
        f"sys.argv = ['vllm-repo', 'validate', '--vllm-version', {VERSION!r}, *{paths!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print('\\nIMPORTED', [m for m in {HEAVY_MODULES!r} if m in sys.modules])\n"
    )
    done = subprocess.run([python_of(script), "-c", probe], capture_output=True, text=True)
    line = next((row for row in done.stdout.splitlines() if row.startswith("IMPORTED ")), None)
    if line is None:
        sys.exit(f"import probe failed:\n{done.stderr}")
    return eval(line.removeprefix("IMPORTED "))  # a list literal this script printed itself


def slowest_imports(script: Path, paths: list[str], top: int = 15) -> list[tuple[int, int, str]]:
    command = [
        python_of(script),
        "-X",
        "importtime",
        "-c",
        "import sys\nfrom vllm_repo.cli import main\n"
        f"sys.argv = ['vllm-repo', 'validate', '--vllm-version', {VERSION!r}, *{paths!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        rows.append((int(cumulative), int(own), name))
    return sorted(rows, reverse=True)[:top]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--script", type=Path, default=None, help="vllm-repo console script (default: this venv's)")
    parser.add_argument("--profile", action="store_true", help="also print the slowest imports (-X importtime)")
    parser.add_argument("--ratio-only", action="store_true", help="only the ratio to a bare `import typer`")
    args = parser.parse_args()
    script = args.script or default_script()

    print(f"vllm-repo validate, cold process per run: {script}")
    print(
        f"machine: {os.cpu_count()} CPUs, load average {', '.join(f'{load:.2f}' for load in os.getloadavg())}; "
        f"{args.runs} timed runs per case after one warm-up\n"
    )
    with tempfile.TemporaryDirectory(prefix="vllm-repo-bench-") as tmp:
        cases = build_cases(Path(tmp))
        medians = startup_ratio(script, cases["one model"], args.runs)
        ratio = medians["validate"] / medians["bare"]
        ratio_ok = ratio <= RATIO_TARGET
        print(
            f"one model vs a bare `import typer`, alternating: {medians['validate']:.3f}s / {medians['bare']:.3f}s "
            f"= {ratio:.2f}x (target <= {RATIO_TARGET}x: {'meets target' if ratio_ok else 'MISSES target'})"
        )
        print(
            f"  a typer app with validate's parameters and an empty command: {medians['floor']:.3f}s = "
            f"{medians['floor'] / medians['bare']:.2f}x; vllm-repo's own share: "
            f"{medians['validate'] - medians['floor']:.3f}s\n"
        )
        if args.ratio_only:
            return 0 if ratio_ok else 1
        missed = not ratio_ok
        print(f"{'case':32} {'median':>8} {'p90':>8} {'min':>8} {'cpu med':>8} {'target':>8}  verdict (wall median)")
        for name, paths in cases.items():
            times, cpus = time_runs(script, paths, args.runs)
            median, tail = statistics.median(times), p90(times)
            ok = median <= TARGETS[name]
            missed |= not ok
            print(
                f"{name:32} {median:7.3f}s {tail:7.3f}s {min(times):7.3f}s {statistics.median(cpus):7.3f}s "
                f"{TARGETS[name]:7.2f}s  {'meets target' if ok else 'MISSES target'}"
            )
        heavy = imported_modules(script, cases["200-model repository"])
        print(f"\nheavy modules imported by validate: {', '.join(heavy) if heavy else 'none'}")
        forbidden = [m for m in heavy if m.split(".")[0] in ("vllm", "torch", "grpc")]
        print(f"vllm / torch / grpc imported: {'YES: ' + ', '.join(forbidden) if forbidden else 'no'}")
        if args.profile or missed:
            print("\nslowest imports (cumulative ms, own ms, module), one-model run:")
            for cumulative, own, module in slowest_imports(script, cases["one model"]):
                print(f"  {cumulative / 1000:7.1f} {own / 1000:7.1f}  {module}")
    return 1 if missed or forbidden else 0


if __name__ == "__main__":
    sys.exit(main())
