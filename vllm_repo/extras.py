"""The optional dependencies of the ``full`` extra, and the error that names it when one is missing.

The base install is what validate needs (it is the pre-commit hook's environment); the OpenAI gateway needs
tritonclient's gRPC and aiohttp, and reading models from the Hugging Face Hub needs huggingface_hub."""

from __future__ import annotations

import importlib.util

from vllm_repo.errors import VllmRepoError

FULL_HINT = "pip install 'vllm-repo[full]' (from a checkout: pip install './vllm-repo[full]')"


class MissingExtra(VllmRepoError):
    """A command needs a package of the ``full`` extra that is not installed."""


def require(feature: str, *modules: str) -> None:
    """Raise MissingExtra naming ``feature`` when one of ``modules`` (top-level import names) is not installed."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(
            f"{feature} needs {', '.join(missing)}, which the base install of vllm-repo leaves out", hint=FULL_HINT
        )


def require_gateway() -> None:
    require("the OpenAI gateway", "tritonclient", "grpc", "aiohttp")


def require_hub() -> None:
    require("reading a model from the Hugging Face Hub", "huggingface_hub")
