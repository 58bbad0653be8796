#!/usr/bin/env python3
"""Regenerate schemas/serve_options.json: vllm serve's own options (beyond EngineArgs) of each listed vLLM release.

    python scripts/build_serve_options.py --python "$VLLM_REPO_SERVING_PYTHON" VERSION [VERSION ...]

As scripts/build_schemas.py: the release installed in --python's environment is read by a real import, every other
one from its PyPI wheel (cached under ~/.cache/vllm-repo/vllm-wheels, VLLM_REPO_WHEEL_CACHE) with that
interpreter's libraries. Releases already in the file and not named are kept; each one read is written at once.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vllm_repo.files import write_atomic
from vllm_repo.schema import serve_options
from vllm_repo.schema import wheel as schema_wheel
from vllm_repo.schema.loader import release_key

MODULE = "vllm_repo.schema.serve_options"


def options_of(version: str, python: str, installed: str | None) -> list[str]:
    if version == installed:
        document = schema_wheel.run_generator(python, [], module=MODULE)
    else:
        src = schema_wheel.unpack_sources(schema_wheel.fetch_wheel(version), version)
        document = schema_wheel.run_generator(python, [src], compat=True, module=MODULE)
    if document["vllm_version"] != version:
        raise SystemExit(f"vLLM {version}: the import reported {document['vllm_version']}")
    return document["options"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="an interpreter with a recent vLLM (the serving environment)")
    parser.add_argument("versions", nargs="+", metavar="VERSION")
    args = parser.parse_args()
    out = ROOT / "schemas" / serve_options.FILE_NAME
    releases = json.loads(out.read_text())["releases"] if out.is_file() else {}
    installed = schema_wheel.installed_release(args.python)
    for version in args.versions:
        releases[version] = options_of(version, args.python, installed)
        ordered = {v: releases[v] for v in sorted(releases, key=lambda v: release_key(v) or (0,))}
        write_atomic(out, json.dumps({"format": serve_options.FORMAT, "releases": ordered}, indent=1) + "\n")
        print(f"vLLM {version}: {len(releases[version])} options", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
