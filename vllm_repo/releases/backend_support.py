"""The vLLM releases the bundled Triton backend drives: the oldest with the AsyncLLM API it uses, and the newest it
was tested with. The range itself is the backend's contract (it ships with the backend into containers, and the
backend checks the vLLM it loads against it); what the rest of vllm-repo says about it is here."""

from __future__ import annotations

from vllm_repo.backend.vllm_repo_backend.contract import MIN_VLLM, NEWEST_TESTED_VLLM

__all__ = ["MIN_VLLM", "NEWEST_TESTED_VLLM", "backend_support", "older_than_supported"]


def _release(version: str | None) -> tuple[int, ...] | None:
    """A version's release numbers ("0.32.0+cpu" and "0.32.0.post1" are 0.32.0); None for one that is not a version."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(Version(version or "0").base_version).release
    except InvalidVersion:
        return None


def older_than_supported(vllm_version: str | None) -> bool:
    """Whether the bundled backend cannot drive ``vllm_version`` (None: unknown, taken as too old); False for a
    string that is not a version."""
    release = _release(vllm_version)
    return release is not None and release < MIN_VLLM


def backend_support(version: str) -> tuple[bool, str]:
    """Whether the bundled backend drives vLLM ``version``, and a sentence saying so."""
    have = _release(version) or (0,)
    oldest, newest = (".".join(map(str, v)) for v in (MIN_VLLM, NEWEST_TESTED_VLLM))
    if have < MIN_VLLM:
        return False, (
            f"the bundled backend needs vLLM {oldest} or newer (the AsyncLLM API); with vLLM {version} keep the "
            "container's own vLLM backend"
        )
    if have[:2] > NEWEST_TESTED_VLLM[:2]:
        return True, (
            f"the bundled backend was tested up to vLLM {newest}; it checks the API it uses when the model loads"
        )
    return True, f"the bundled backend drives vLLM {version} (it supports {oldest} to {newest})"
