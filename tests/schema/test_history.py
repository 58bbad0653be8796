"""Key history: removed and renamed engine arguments, checked against the bundled schema files themselves."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from packaging.version import Version

from vllm_repo.schema import history as key_history
from vllm_repo.schema.history import CURATED, build_index, explain_missing_key, releases_with, replacement_for
from vllm_repo.schema.loader import bundled_versions

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas" / "engine_args"
VERSIONS = list(bundled_versions())
NEWEST = VERSIONS[-1]


def _fields(version: str) -> set[str]:
    return set(json.loads((SCHEMAS / f"vllm-{version}.json").read_text())["fields"])


FIELDS = {v: _fields(v) for v in VERSIONS}
ALL_KEYS = sorted(set().union(*FIELDS.values()))


def _last_before(key: str, version: str) -> str | None:
    older = [v for v in VERSIONS if Version(v) < Version(version) and key in FIELDS[v]]
    return older[-1] if older else None


def test_the_index_is_current() -> None:
    on_disk = json.loads((SCHEMAS / "index.json").read_text())
    assert on_disk == build_index(SCHEMAS), "run scripts/build_schemas.py (or key_history.write_index())"


def test_releases_with_matches_the_files() -> None:
    for key in ALL_KEYS:
        assert releases_with(key) == [v for v in VERSIONS if key in FIELDS[v]], key
    assert releases_with("no_such_key") == []


@pytest.mark.parametrize("version", VERSIONS)
def test_every_missing_key_is_explained_and_present_keys_are_not(version: str) -> None:
    for key in ALL_KEYS:
        message = explain_missing_key(key, version)
        if key in FIELDS[version]:
            assert message is None, key
            continue
        assert message is not None, key
        last = _last_before(key, version)
        if last is not None:
            removed = VERSIONS[VERSIONS.index(last) + 1]
            assert message.startswith(f"`{key}` was removed in vLLM {removed} (last in {last})"), message
        else:
            first = next(v for v in VERSIONS if key in FIELDS[v])
            assert message.startswith(f"`{key}` exists only from vLLM {first} (newer than the chosen {version})")


def test_a_typo_has_no_history() -> None:
    assert explain_missing_key("max_modle_len", NEWEST) is None


def test_known_renames_say_what_to_use() -> None:
    message = explain_missing_key("disable_log_requests", NEWEST)
    assert message is not None and "use `enable_log_requests`" in message
    message = explain_missing_key("guided_decoding_backend", NEWEST)
    assert message is not None and "use `structured_outputs_config`" in message


def test_removed_keys_without_successor_say_only_that() -> None:
    for key in ("num_scheduler_steps", "use_v2_block_manager", "swap_space"):
        if not releases_with(key) or key in FIELDS[NEWEST]:
            pytest.skip(f"{key} is not a removed key of the bundled releases")
        message = explain_missing_key(key, NEWEST)
        assert message is not None and "was removed in" in message and "use `" not in message, message


@pytest.mark.parametrize("old", sorted(CURATED))
def test_each_curated_replacement_holds_in_the_schemas(old: str) -> None:
    new = CURATED[old].new
    found = releases_with(old)
    assert found, f"{old} is in no bundled release"
    after = [v for v in VERSIONS if Version(v) > Version(found[-1])]
    if after:
        # Where the old key is gone, the new one is there (a real replacement, not a guess).
        assert new in FIELDS[after[0]], (old, new, after[0])
    else:
        # Still present but deprecated in the newest release: its successor exists beside it.
        assert new in FIELDS[NEWEST], (old, new)


def test_replacements_found_in_help_texts_exist_where_the_old_key_ends() -> None:
    hints = key_history.index()["hints"]
    assert hints, "no replacement was read from vLLM's help texts"
    for old, hint in hints.items():
        last = releases_with(old)[-1]
        later = set().union(*(FIELDS[v] for v in VERSIONS if Version(v) >= Version(last)))
        assert hint["new"] in later, (old, hint)
        assert replacement_for(old) is not None


def test_a_stale_index_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Three releases indexed, then a fourth added without rebuilding the index: history must see all four.
    picked = [VERSIONS[0], VERSIONS[len(VERSIONS) // 2], VERSIONS[-2], NEWEST]
    for v in picked[:3]:
        shutil.copy(SCHEMAS / f"vllm-{v}.json", tmp_path)
    key_history.write_index(tmp_path)
    shutil.copy(SCHEMAS / f"vllm-{NEWEST}.json", tmp_path)
    monkeypatch.setattr(key_history, "_schema_dir", lambda: tmp_path)
    monkeypatch.setattr(key_history, "bundled_versions", lambda: tuple(picked))
    key_history.index.cache_clear()
    key_history._fields_of.cache_clear()
    try:
        assert key_history.index()["versions"] == picked
        assert releases_with("model") == picked
    finally:
        key_history.index.cache_clear()
        key_history._fields_of.cache_clear()
