#!/usr/bin/env python3
"""Regenerate the bundled EngineArgs schemas (schemas/engine_args/vllm-*.json) and the key-history index.

    python scripts/build_schemas.py --python "$VLLM_REPO_SERVING_PYTHON" [VERSION ...]

--python is an interpreter with a recent vLLM installed (the serving environment from .ci/setup-serving.sh). The
release installed there is read by a real import; every other release is read from its PyPI wheel with that
interpreter's libraries (see vllm_repo/schema/wheel.py). Wheels are cached under ~/.cache/vllm-repo/vllm-wheels
(VLLM_REPO_WHEEL_CACHE), about 300 MB each; pass --prune to delete each wheel once its sources are unpacked.

With no VERSION, every release of vllm_repo/releases/bundled.py is rebuilt. --index-only rebuilds only index.json
(the key history), e.g. after `vllm-repo schema generate --output schemas/engine_args/vllm-X.Y.Z.json` with an
installed vLLM.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vllm_repo.files import write_atomic
from vllm_repo.releases.bundled import BUNDLED
from vllm_repo.schema import generate as schema_gen
from vllm_repo.schema import history as key_history
from vllm_repo.schema import wheel as schema_wheel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "versions", nargs="*", help="releases to rebuild (default: every release of vllm_repo/releases/bundled.py)"
    )
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
    for version in args.versions or list(BUNDLED):
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
