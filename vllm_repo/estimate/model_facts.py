"""Everything the estimate needs to know about a model, without downloading its weights.

- config.json from a local model directory, the local Hugging Face cache, or the Hub.
- Exact weight bytes per tensor from safetensors headers: read from local files (only the header, never the
  tensors), or fetched by huggingface_hub (HTTP range requests for the headers only). A
  model.safetensors.index.json total is the next best thing; with nothing at all the parameter count comes from
  the architecture and the estimate says so.
HF_HUB_OFFLINE=1 (or offline=True) never touches the network; HF_TOKEN is honoured by huggingface_hub.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_repo.errors import UsageError
from vllm_repo.estimate.architecture import Architecture, from_config
from vllm_repo.hf import is_repo_id


class ModelFactsError(UsageError):
    """The model can't be read; the message says why and what to do."""


class ModelNotAvailableOffline(ModelFactsError):
    """The model's config is neither local nor in the HF cache and the network is not allowed."""


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    nbytes: int


@dataclass
class WeightsInfo:
    source: str
    """'safetensors headers', 'hub safetensors metadata' or 'index total_size'."""
    total_bytes: int
    tensors: list[TensorEntry] = field(default_factory=list)
    """Empty when only a total is known."""


@dataclass
class ModelFacts:
    model: str
    """What the user named: a repo id or a directory."""
    config: dict[str, Any]
    config_source: str
    weights: WeightsInfo | None
    arch: Architecture

    @property
    def quantization_config(self) -> dict[str, Any] | None:
        for cfg in (self.config, self.arch.config):
            q = cfg.get("quantization_config") or cfg.get("compression_config")
            if isinstance(q, dict):
                return q
        return None


def offline_mode(offline: bool | None) -> bool:
    if offline is not None:
        return offline
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


# ----------------------------------------------------------------------------------------------- safetensors --
def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a .safetensors file: 8-byte little-endian length, then that many bytes of JSON."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) != 8:
            raise ModelFactsError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (length,) = struct.unpack("<Q", head)
        size = path.stat().st_size
        if length > min(size - 8, 100 * 1024 * 1024):
            raise ModelFactsError(f"{path}: not a safetensors file (header length {length} exceeds the file)")
        try:
            header = json.loads(fh.read(length))
        except ValueError as exc:
            raise ModelFactsError(f"{path}: safetensors header is not valid JSON ({exc})") from None
    if not isinstance(header, dict):
        raise ModelFactsError(f"{path}: safetensors header is not a JSON object")
    return header


def _entries_from_header(header: dict[str, Any], where: str) -> list[TensorEntry]:
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = info["data_offsets"]
            entries.append(TensorEntry(name, str(info["dtype"]), int(end) - int(start)))
        except (KeyError, TypeError, ValueError):
            raise ModelFactsError(f"{where}: tensor '{name}' has no valid dtype/data_offsets") from None
    return entries


def _weight_files(directory: Path) -> list[Path]:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values()))
        except ValueError:
            names = []
        files = [directory / n for n in names if (directory / n).is_file()]
        # Some shards missing (a partial download): the index total is the better figure.
        return files if names and len(files) == len(names) else []
    files = sorted(directory.glob("model*.safetensors")) or sorted(directory.glob("*.safetensors"))
    # Mistral repos ship consolidated.safetensors beside the HF shards: count the weights once.
    if len(files) > 1:
        files = [f for f in files if f.name != "consolidated.safetensors"]
    return files


def local_weights(directory: Path) -> WeightsInfo | None:
    files = _weight_files(directory)
    if files:
        tensors: list[TensorEntry] = []
        for path in files:
            tensors.extend(_entries_from_header(read_safetensors_header(path), str(path)))
        return WeightsInfo("safetensors headers", sum(t.nbytes for t in tensors), tensors)
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            total = json.loads(index.read_text(encoding="utf-8"))["metadata"]["total_size"]
            return WeightsInfo("index total_size", int(total))
        except (ValueError, KeyError, TypeError):
            return None
    return None


# ------------------------------------------------------------------------------------------------- loading --
def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelFactsError(f"{path}: can't read ({exc.strerror})") from None
    except ValueError as exc:
        raise ModelFactsError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ModelFactsError(f"{path}: config.json must be a JSON object")
    return data


def load_model_facts(
    model: str,
    *,
    offline: bool | None = None,
    revision: str | None = None,
    token: str | None = None,
    base: Path | None = None,
) -> ModelFacts:
    """Config and weight sizes of a local model directory or a Hugging Face repo id."""
    path = Path(model).expanduser()
    if not path.is_absolute() and base is not None and (base / path).exists():
        path = base / path
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file():
            raise ModelFactsError(f"{path}: no config.json (is this a Hugging Face model directory?)")
        config = _read_config(config_path)
        return ModelFacts(model, config, str(config_path), local_weights(path), from_config(config))
    if path.exists():
        raise ModelFactsError(f"{model}: a file, not a model directory (GGUF files are not supported)")
    if not is_repo_id(model):
        raise ModelFactsError(f"{model}: no such directory, and not a Hugging Face repo id (owner/name)")
    return _load_from_hub(model, offline=offline_mode(offline), revision=revision, token=token)


def _load_from_hub(repo_id: str, *, offline: bool, revision: str | None, token: str | None) -> ModelFacts:
    from vllm_repo.extras import require_hub

    require_hub()
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    except Exception:  # an invalid repo id or revision
        cached = None
    if isinstance(cached, str):
        config_path = Path(cached)
        config = _read_config(config_path)
        weights = local_weights(config_path.parent)
        if weights is None and not offline:
            weights = _hub_weights(repo_id, revision, token)
        return ModelFacts(repo_id, config, f"HF cache ({config_path})", weights, from_config(config))
    if offline:
        raise ModelNotAvailableOffline(
            f"{repo_id}: config.json is not in the local Hugging Face cache and the network is off "
            "(HF_HUB_OFFLINE or offline mode); download it first (huggingface-cli download "
            f"{repo_id} config.json) or pass a local model directory"
        )
    _check_hub_reachable(repo_id)
    config_path = _hub_download_config(repo_id, revision, token)
    config = _read_config(config_path)
    return ModelFacts(
        repo_id, config, f"Hugging Face Hub ({repo_id})", _hub_weights(repo_id, revision, token), from_config(config)
    )


OFFLINE_HINT = (
    "use a local model directory, or work offline (estimate --offline, or HF_HUB_OFFLINE=1) with the model's "
    "config.json in the local Hugging Face cache; behind a proxy, set HTTPS_PROXY"
)


def _check_hub_reachable(repo_id: str, timeout: float = 5.0) -> None:
    """One quick connection to the Hub before huggingface_hub's own requests, which retry a refused or unresolvable
    connection five times with back-off (about 25 s) before giving up. Any HTTP answer, even an error, means it is
    reachable: huggingface_hub then reports gated, missing and private models in its own words."""
    import urllib.error
    import urllib.request

    from huggingface_hub import constants

    url = f"{constants.ENDPOINT.rstrip('/')}/api/models/{repo_id}"
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return
    except OSError as exc:  # URLError (refused, unresolvable), a timeout
        reason = getattr(exc, "reason", exc)
        raise ModelFactsError(
            f"{repo_id}: can't reach the Hugging Face Hub at {constants.ENDPOINT} ({reason})", hint=OFFLINE_HINT
        ) from None


def _hub_download_config(repo_id: str, revision: str | None, token: str | None) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        return Path(hf_hub_download(repo_id, "config.json", revision=revision, token=token))
    except GatedRepoError:
        raise ModelFactsError(f"{repo_id} is gated: accept its licence on huggingface.co and set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise ModelFactsError(
            f"{repo_id}: no such model on the Hugging Face Hub (or it is private: set HF_TOKEN)"
        ) from None
    except HfHubHTTPError as exc:
        raise ModelFactsError(f"{repo_id}: the Hugging Face Hub refused config.json ({exc})") from None
    except Exception:  # connection errors come in many types
        raise ModelFactsError(
            f"{repo_id}: can't reach the Hugging Face Hub for config.json", hint=OFFLINE_HINT
        ) from None


def _hub_weights(repo_id: str, revision: str | None, token: str | None) -> WeightsInfo | None:
    """Per-tensor sizes from the safetensors headers on the Hub, without the weights themselves."""
    try:
        from huggingface_hub import get_safetensors_metadata

        meta = get_safetensors_metadata(repo_id, revision=revision, token=token)
    except Exception:  # no safetensors in the repo, or the Hub is unreachable: fall back to the architecture
        return None
    tensors = []
    for file_meta in meta.files_metadata.values():
        for name, info in file_meta.tensors.items():
            start, end = info.data_offsets
            tensors.append(TensorEntry(name, str(info.dtype), int(end) - int(start)))
    if not tensors:
        return None
    return WeightsInfo("hub safetensors metadata", sum(t.nbytes for t in tensors), tensors)
