"""Which bundled vLLM releases have which engine argument, and what replaced the ones that went away.

Derived from the bundled schemas. ``validate`` asks on every run, so the derivation is precomputed into
``schemas/engine_args/index.json`` (``build_index``, run whenever a schema is added: ``scripts/build_schemas.py``
does it); reading it costs about a millisecond, where loading every schema costs tens. When the index does not list
exactly the bundled releases (a schema added without rebuilding it), the history is derived from the schema files
instead, so it is never wrong, only slower.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_repo.files import write_atomic
from vllm_repo.schema.loader import _schema_dir, bundled_release_key, bundled_versions

INDEX_FORMAT = 1
INDEX_NAME = "index.json"


@dataclass(frozen=True)
class Replacement:
    """What to write instead of a removed key, and how ``upgrade`` carries the value over where there is one right
    answer: into the new key's object under ``nest`` (with ``beside`` next to it), or by the ``values`` table (old
    value -> new value; None: the old value was the default, the key just goes). A value the table does not list has
    no mechanical answer."""

    new: str  # the engine argument that replaces it
    how: str = ""  # how to carry the value over, when it is not a plain rename
    nest: str | None = None
    beside: tuple[tuple[str, Any], ...] = ()
    values: tuple[tuple[Any, Any], ...] | None = None

    @property
    def plain(self) -> bool:
        """A rename with the value unchanged."""
        return not self.how and self.nest is None and self.values is None

    def carried(self, value: Any) -> tuple[bool, Any]:
        """(listed, new value) by the ``values`` table; a quoted "true"/"false" counts as what it means."""
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        for old, new in self.values or ():
            if type(old) is type(value) and old == value:
                return True, new
        return False, None


def _nested(new: str, name: str, **beside: Any) -> Replacement:
    """The key became ``name`` inside the object ``new`` takes."""
    shown = ", ".join([*(f'"{k}": "{v}"' for k, v in beside.items()), f'"{name}": ...'])
    return Replacement(new, "{" + shown + "}", nest=name, beside=tuple(beside.items()))


# Known renames and replacements, each checked by tests against the bundled schemas: the old key exists in some
# bundled release, the new one in the release where the old one is gone. The rest are found in vLLM's own help and
# deprecation texts ("replaced by ...", "use --x instead") when the index is built.
CURATED: dict[str, Replacement] = {
    "disable_log_requests": Replacement(
        "enable_log_requests",
        "the meaning is inverted: requests are no longer logged by default",
        values=((True, False), (False, True)),
    ),
    "guided_decoding_backend": Replacement(
        "structured_outputs_config", 'write {"backend": "<name>"} there', nest="backend"
    ),
    "guided_decoding_disable_fallback": _nested("structured_outputs_config", "disable_fallback"),
    "guided_decoding_disable_any_whitespace": _nested("structured_outputs_config", "disable_any_whitespace"),
    "guided_decoding_disable_additional_properties": _nested(
        "structured_outputs_config", "disable_additional_properties"
    ),
    "speculative_model": _nested("speculative_config", "model"),
    "num_speculative_tokens": _nested("speculative_config", "num_speculative_tokens"),
    "speculative_draft_tensor_parallel_size": _nested("speculative_config", "draft_tensor_parallel_size"),
    "speculative_max_model_len": _nested("speculative_config", "max_model_len"),
    "speculative_disable_by_batch_size": _nested("speculative_config", "disable_by_batch_size"),
    "ngram_prompt_lookup_max": _nested("speculative_config", "prompt_lookup_max", method="ngram"),
    "ngram_prompt_lookup_min": _nested("speculative_config", "prompt_lookup_min", method="ngram"),
    "worker_use_ray": Replacement(
        "distributed_executor_backend", 'set it to "ray"', values=((True, "ray"), (False, None))
    ),
    "task": Replacement("runner", 'and/or "convert" (e.g. "runner": "pooling")'),
    "enable_reasoning": Replacement("reasoning_parser", "setting a parser enables reasoning"),
    "override_pooler_config": Replacement("pooler_config"),
    "disable_mm_preprocessor_cache": Replacement(
        "mm_processor_cache_gb", "0 disables the cache", values=((True, 0), (False, None))
    ),
    "cuda_graph_sizes": Replacement("cudagraph_capture_sizes"),
    "rope_scaling": _nested("hf_overrides", "rope_scaling"),
    "rope_theta": _nested("hf_overrides", "rope_theta"),
    "log_config_file": _nested("logging_config", "pylogging_config_file"),
    "num_redundant_experts": _nested("eplb_config", "num_redundant_experts"),
    "eplb_window_size": _nested("eplb_config", "window_size"),
    "eplb_step_interval": _nested("eplb_config", "step_interval"),
    "eplb_log_balancedness": _nested("eplb_config", "log_balancedness"),
    "enable_multimodal_encoder_data_parallel": Replacement(
        "mm_encoder_tp_mode", 'set it to "data"', values=((True, "data"), (False, None))
    ),
    "dcp_kv_cache_interleave_size": Replacement("cp_kv_cache_interleave_size"),
}

# In help and deprecation texts: "... replaced by `x`", "Use --x-y instead", "in favor of x".
_HINT_PATTERNS = (
    re.compile(r"replaced (?:by|with) [`'\"]?(?:--)?([a-z][a-z0-9_\-.]*)", re.IGNORECASE),
    re.compile(r"\buse [`'\"]?(?:--)?([a-z][a-z0-9_\-.]*)[`'\"]? instead", re.IGNORECASE),
    re.compile(r"\bplease use [`'\"]?(?:--)?([a-z][a-z0-9_\-.]*)", re.IGNORECASE),
    re.compile(r"in favou?r of [`'\"]?(?:--)?([a-z][a-z0-9_\-.]*)", re.IGNORECASE),
    re.compile(r"\buse [`'\"]?--([a-z][a-z0-9_\-.]*)", re.IGNORECASE),
)


# --------------------------------------------------------------------------------------------- building the index
def _load_raw(version: str, schema_dir: Path) -> dict[str, Any]:
    return json.loads((schema_dir / f"vllm-{version}.json").read_text(encoding="utf-8"))


def _hinted_replacement(text: str | None, candidates: set[str], own: str) -> str | None:
    if not text:
        return None
    for pattern in _HINT_PATTERNS:
        for match in pattern.finditer(text):
            name = match.group(1).rstrip(".").replace("-", "_").split(".")[0]
            if name != own and name in candidates:
                return name
    return None


def build_index(schema_dir: Path | None = None) -> dict[str, Any]:
    """The history of every key over the bundled releases, as written to ``index.json``."""
    schema_dir = schema_dir or _schema_dir()
    versions = sorted((p.stem.removeprefix("vllm-") for p in schema_dir.glob("vllm-*.json")), key=bundled_release_key)
    raw = {v: _load_raw(v, schema_dir) for v in versions}
    names = sorted({name for doc in raw.values() for name in doc["fields"]})
    present = {name: "".join("1" if name in raw[v]["fields"] else "0" for v in versions) for name in names}
    deprecated = {
        name: "".join("1" if raw[v]["fields"].get(name, {}).get("deprecated") else "0" for v in versions)
        for name in names
    }
    deprecated = {name: mask for name, mask in deprecated.items() if "1" in mask}
    # The keys of each release and every later one: a successor named in a help text must exist there.
    later_keys: dict[str, set[str]] = {}
    running: set[str] = set()
    for v in reversed(versions):
        running = running | set(raw[v]["fields"])
        later_keys[v] = running
    hints: dict[str, dict[str, str]] = {}
    for name in names:
        # The newest text that names a successor.
        for v in reversed(versions):
            spec = raw[v]["fields"].get(name)
            if spec is None:
                continue
            later = later_keys[v]
            new = _hinted_replacement(spec.get("deprecation"), later, name) or (
                _hinted_replacement(spec.get("help"), later, name) if spec.get("deprecated") else None
            )
            if new:
                hints[name] = {"new": new, "from": f"vLLM {v}'s help text"}
                break
    return {"format": INDEX_FORMAT, "versions": versions, "present": present, "deprecated": deprecated, "hints": hints}


def write_index(schema_dir: Path | None = None) -> Path:
    schema_dir = schema_dir or _schema_dir()
    path = schema_dir / INDEX_NAME
    text = json.dumps(build_index(schema_dir), indent=0, sort_keys=True) + "\n"
    write_atomic(path, text)
    return path


# --------------------------------------------------------------------------------------------- reading it
@functools.cache
def index() -> dict[str, Any]:
    """The key history: ``index.json`` when it matches the bundled schemas, else derived from them now."""
    path = _schema_dir() / INDEX_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    if not data or data.get("format") != INDEX_FORMAT or tuple(data.get("versions", ())) != bundled_versions():
        data = build_index()
    return data


def releases_with(name: str) -> list[str]:
    """The bundled releases whose EngineArgs have ``name``, oldest first."""
    data = index()
    mask = data["present"].get(name)
    if mask is None:
        return []
    return [v for v, bit in zip(data["versions"], mask, strict=True) if bit == "1"]


def deprecated_in(name: str) -> list[str]:
    data = index()
    mask = data["deprecated"].get(name, "0" * len(data["versions"]))
    return [v for v, bit in zip(data["versions"], mask, strict=True) if bit == "1"]


def replacement_for(name: str) -> Replacement | None:
    if name in CURATED:
        return CURATED[name]
    hint = index()["hints"].get(name)
    return Replacement(hint["new"]) if hint else None


def _ranges(found: list[str], versions: list[str]) -> str:
    """'0.8.4-0.10.2, 0.13.0' for the releases in ``found``, contiguous in ``versions``."""
    spans: list[list[str]] = []
    last_index = None
    for v in found:
        i = versions.index(v)
        if last_index is not None and i == last_index + 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
        last_index = i
    return ", ".join(a if a == b else f"{a} to {b}" for a, b in spans)


def describe_releases(name: str) -> str:
    found = releases_with(name)
    return _ranges(found, list(index()["versions"])) if found else "none of the bundled releases"


def explain_missing_key(name: str, schema_version: str) -> str | None:
    """Why ``name`` is not an engine argument of ``schema_version`` (a bundled release), or None when the history
    says nothing (a plain typo). The message reads after "'name' is not an engine argument of vLLM X: "."""
    data = index()
    versions: list[str] = list(data["versions"])
    found = releases_with(name)
    if schema_version in found:
        return None
    chosen = bundled_release_key(schema_version)
    older = [v for v in found if bundled_release_key(v) < chosen]
    newer = [v for v in found if bundled_release_key(v) > chosen]
    replacement = replacement_for(name)
    here = _fields_of(schema_version)
    # The replacement, where the chosen release has it.
    instead = replacement if replacement is not None and replacement.new in here else None
    use = ""
    if instead is not None:
        use = f"; use `{instead.new}`" + (f" ({instead.how})" if instead.how else "")

    if older:
        last = older[-1]
        after = [v for v in versions if bundled_release_key(v) > bundled_release_key(last)]
        removed = after[0] if after else schema_version
        text = f"`{name}` was removed in vLLM {removed} (last in {last}){use}"
        if newer:
            text += f"; it is back from {newer[0]}"
        return text
    if newer:
        return f"`{name}` exists only from vLLM {newer[0]} (newer than the chosen {schema_version})" + (
            f"; in {schema_version} use `{instead.new}`" if instead is not None else ""
        )
    if instead is not None:
        oldest = versions[0] if versions else "?"
        return f"`{name}` is an engine argument of vLLM releases older than {oldest} only{use}"
    return None


def explain_deprecated_key(name: str, schema_version: str) -> str | None:
    """A note for a key that exists in ``schema_version`` but is deprecated there, else None."""
    from vllm_repo.schema.loader import load_schema

    field = load_schema(schema_version).get(name)
    if field is None or not field.deprecated:
        return None
    found = releases_with(name)
    gone = [
        v
        for v in index()["versions"]
        if bundled_release_key(v) > bundled_release_key(schema_version) and v not in found
    ]
    replacement = replacement_for(name)
    text = f"`{name}` is deprecated in vLLM {schema_version}"
    if gone:
        text += f" and gone in {gone[0]}"
    if replacement is not None:
        text += f"; use `{replacement.new}`" + (f" ({replacement.how})" if replacement.how else "")
    return text


@functools.cache
def _fields_of(version: str) -> frozenset[str]:
    data = index()
    try:
        i = data["versions"].index(version)
    except ValueError:
        return frozenset()
    return frozenset(name for name, mask in data["present"].items() if mask[i] == "1")
