"""vllm serve's own options per vLLM release: those its argument parser takes beyond EngineArgs, which is what a
model's openai.json may hold.

``schemas/serve_options.json`` ({"format": 1, "releases": {"0.26.0": [...], ...}}) is written by
``scripts/build_serve_options.py``, which runs :func:`introspect` (``python -m vllm_repo.schema.serve_options``) in an
interpreter that imports each release, by the routes of the EngineArgs schemas (vllm_repo/schema/wheel.py). Reading
it (:func:`bundled_serve_options`) imports nothing of vLLM.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import json
import os
import sys
from pathlib import Path

from vllm_repo.backend.vllm_repo_backend.contract import SERVE_PARSER_MODULES, SERVE_PARSER_NOT_OPTIONS
from vllm_repo.errors import VllmRepoError

FORMAT = 1
FILE_NAME = "serve_options.json"


def introspect() -> dict[str, object]:
    """The importable vLLM's release and its vllm serve options, sorted (imports vLLM)."""
    from vllm_repo.schema.generate import _help_requested, _parser_class, base_version, installed_version

    if os.environ.get("VLLM_REPO_SCHEMA_COMPAT") == "1":  # an older release under newer libraries (wheel.py)
        from vllm_repo.schema.compat import apply_library_compat

        apply_library_compat()
    with _help_requested():
        from vllm.engine.arg_utils import AsyncEngineArgs

        errors = []
        for name in SERVE_PARSER_MODULES:
            try:
                make_arg_parser = importlib.import_module(name).make_arg_parser
                break
            except (ImportError, AttributeError) as exc:
                errors.append(f"{name}: {exc}")
        else:
            raise VllmRepoError(f"vllm serve's make_arg_parser not found ({'; '.join(errors)})")
        parser = make_arg_parser(_parser_class()())
    engine = {field.name for field in dataclasses.fields(AsyncEngineArgs)}
    options = {
        action.dest
        for action in parser._actions
        if action.option_strings and action.dest not in engine and action.dest not in SERVE_PARSER_NOT_OPTIONS
    }
    return {"vllm_version": base_version(installed_version()), "options": sorted(options)}


def bundled_path() -> Path:
    from vllm_repo.schema.loader import _schema_dir

    return _schema_dir().parent / FILE_NAME


@functools.cache
def bundled_serve_options() -> dict[str, frozenset[str]]:
    """{release: its vllm serve options} of the releases in the bundled file."""
    document = json.loads(bundled_path().read_text(encoding="utf-8"))
    return {release: frozenset(options) for release, options in document["releases"].items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_repo.schema.serve_options",
        description="Write the importable vLLM's vllm serve options as JSON.",
    )
    parser.add_argument("--output", "-o", type=Path, required=True, help="file to write")
    args = parser.parse_args(argv)
    args.output.write_text(json.dumps(introspect(), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
