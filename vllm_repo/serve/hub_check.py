"""Before a local launch: a model named by Hugging Face repo id that the server could not load. With no copy in the
Hugging Face cache the server reads, vLLM downloads it; where huggingface.co can't be reached (or offline mode is on),
the model fails to load only after huggingface_hub's retries, half a minute into the start (doctor's VD114). One quick
connection per launch says it before Triton starts.

Reads only files and the environment the server will have (it needs no huggingface_hub: the base install launches).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path

from vllm_repo import hf
from vllm_repo.repository import ModelDirectory
from vllm_repo.serve.errors import LaunchError

DEFAULT_ENDPOINT = "https://huggingface.co"
# How long the one connection to the Hub may take: huggingface_hub's own default for a request.
CONNECT_TIMEOUT_S = 10.0


def check_hub_models(models: Iterable[ModelDirectory], environ: Mapping[str, str]) -> None:
    """Raise LaunchError for the first vLLM model whose ``model`` is a repo id with no copy in the Hugging Face cache
    ``environ`` points at, while offline mode is on or the Hub does not answer."""
    wanted = [(m.name, repo_id) for m in models if (repo_id := _hub_model(m)) is not None]
    missing = [(name, repo_id) for name, repo_id in wanted if not _cached(repo_id, environ)]
    if not missing:
        return
    name, repo_id = missing[0]
    if _is_true(environ.get("HF_HUB_OFFLINE", "")):
        why = "HF_HUB_OFFLINE is set in the environment the server gets"
    else:
        endpoint = environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
        reason = _unreachable(endpoint, repo_id, environ)
        if reason is None:
            return
        why = f"can't reach the Hugging Face Hub at {endpoint} ({reason})"
    raise LaunchError(
        f"{name}: model {repo_id} is not in the Hugging Face cache ({_cache_dir(environ)}) and {why}: it would fail "
        "to load (doctor's VD114); not starting",
        hint="give model.json a local directory with the model's files, or download it where the Hub is reachable "
        f"(`hf download {repo_id}`, into the cache the server reads: HF_HOME); behind a proxy, set HTTPS_PROXY",
    )


def _hub_model(model: ModelDirectory) -> str | None:
    """The repo id a vLLM model's model.json names, None for a local directory or another backend's model."""
    if not model.uses_vllm_backend:
        return None
    name = model.engine_args_data().get("model")
    if not isinstance(name, str) or not hf.is_repo_id(name):
        return None
    if Path(name).expanduser().exists() or (model.path / name).exists():
        return None  # "org/model" names a directory here: vLLM loads that
    return name


def _cache_dir(environ: Mapping[str, str]) -> Path:
    """Where huggingface_hub keeps models for a process with ``environ``: HF_HUB_CACHE, HF_HOME/hub, or the XDG
    cache's huggingface/hub."""
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"]).expanduser()
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"]).expanduser() / "hub"
    xdg = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def _cached(repo_id: str, environ: Mapping[str, str]) -> bool:
    """Whether a snapshot of the model (its config.json, which vLLM reads first) is in the cache."""
    snapshots = _cache_dir(environ) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    return any(snapshots.glob("*/config.json"))


def _unreachable(endpoint: str, repo_id: str, environ: Mapping[str, str]) -> str | None:
    """Why the Hub can't be reached, None when it answers (any HTTP answer, an error status included: a gated or
    missing model is vLLM's to report in its words)."""
    proxies = {
        scheme: value
        for scheme in ("http", "https")
        if (value := environ.get(f"{scheme}_proxy") or environ.get(f"{scheme.upper()}_PROXY"))
    }
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies))
    request = urllib.request.Request(f"{endpoint.rstrip('/')}/api/models/{repo_id}", method="HEAD")
    try:
        opener.open(request, timeout=CONNECT_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as exc:  # URLError (refused, unresolvable), a timeout; ValueError: a bad endpoint
        return str(getattr(exc, "reason", None) or exc)
    return None


def _is_true(value: str) -> bool:
    return value.strip().upper() in ("1", "ON", "YES", "TRUE")
