"""validate over 45 real model repositories from 30 public projects (../shared/data/realworld_repos, with their
real defects listed in SOURCES.md): no crash on any, no error on the official sample, the real defects found."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vllm_repo.validate import validate_paths

CORPUS = Path(
    os.environ.get(
        "VLLM_REPO_REALWORLD_REPOS", Path(__file__).resolve().parents[3] / "shared" / "data" / "realworld_repos"
    )
)
pytestmark = pytest.mark.skipif(
    not CORPUS.is_dir(), reason=f"real-world corpus not found at {CORPUS} (set VLLM_REPO_REALWORLD_REPOS)"
)


def folders() -> list[Path]:
    return sorted(p for p in CORPUS.iterdir() if (p / "model_repository").is_dir()) if CORPUS.is_dir() else []


def check(folder: str, version: str = "0.32.0"):
    return validate_paths([CORPUS / folder / "model_repository"], vllm_version=version)


def found(result, code: str, model: str | None = None, text: str = "") -> bool:
    return any(
        d.code == code and (model is None or f"/{model}/" in f"{d.file}/") and text in d.message
        for d in result.diagnostics
    )


@pytest.mark.parametrize("folder", [p.name for p in folders()])
@pytest.mark.parametrize("version", ["0.32.0", None])
def test_no_crash_and_every_finding_is_placed(folder, version):
    result = validate_paths([CORPUS / folder / "model_repository"], vllm_version=version)
    assert result.models
    for d in result.diagnostics:
        assert d.file and d.message
        assert (d.line is None) == (d.column is None)


def test_official_sample_has_no_error_or_warning():
    result = check("01_triton-inference-server__vllm_backend")
    assert [d for d in result.diagnostics if d.severity.value != "info"] == []


def test_real_defects_are_found():
    # Each line: a defect SOURCES.md documents, and the finding that names it.
    assert found(check("02_triton-inference-server__vllm_backend"), "VR302", text="disable_log_requests")
    r03 = check("03_triton-inference-server__vllm_backend")
    assert found(r03, "VR103", "vllm_opt") and found(r03, "VR302", text="disable_log_requests")
    assert found(check("04_triton-inference-server__tutorials"), "VR307")
    r05 = check("05_triton-inference-server__tutorials")
    assert found(r05, "VR107", "eagle_model copy") and found(r05, "VR302", text="speculative_model")
    assert found(check("07_carlmes__triton-vllm-inference-server"), "VR101")
    r08 = check("08_astrodev-nguyen__model_deploy_triton")
    assert found(r08, "VR203")
    r10 = check("10_hungzin311__triton")
    assert found(r10, "VR504", text="1.15") and found(r10, "VR208", text="'gpu_memory_utilization'")
    assert found(check("15_trungthanhnguyenn__aqa"), "VR208", text="'stream'")
    r18 = check("18_olichuuwon__s3-triton-vllm-llama")
    assert found(r18, "VR101") and found(r18, "VR102", text="model_v1")
    assert found(check("21_pranavkantgaur__triton_multimodel_vllm_backend"), "VR504", text="2.55")
    r27 = check("27_samtakoy__llm-engineer-triton-inference")
    assert found(r27, "VR204") and found(r27, "VR104")
    assert found(check("28_dxv2k__vllm_backend"), "VR303", text="enforce_eager")
    assert found(check("30_ScReameer__tritonserver-vllm-backend"), "VR504", text="1.65")
    assert found(check("34_dborza__llm-serving"), "VR105", text=".DS_Store") or not any(
        p.name == ".DS_Store" for p in (CORPUS / "34_dborza__llm-serving").rglob("*")
    )
    r36 = check("36_Raytorin__triton-openai-gateway")
    assert found(r36, "VR202") and found(r36, "VR103")


def test_string_booleans_are_flagged_where_the_key_exists():
    # Releases that still have disable_log_requests: there the string "true" is a type error, not an unknown key.
    from vllm_repo.schema.loader import bundled_versions, load_schema

    having = [v for v in bundled_versions() if load_schema(v).get("disable_log_requests") is not None]
    assert having, "older bundled releases have disable_log_requests"
    result = check("17_hamelsmu__llama-inference", having[-1])
    assert found(result, "VR303", text="disable_log_requests")
    assert not found(result, "VR302", text="disable_log_requests")


@pytest.mark.parametrize("folder", [p.name for p in folders()])
def test_fix_on_a_copy_changes_only_the_fixed_lines_and_its_findings_go(folder, tmp_path):
    import difflib
    import shutil

    from vllm_repo.validate import fix_paths

    copy = tmp_path / folder
    shutil.copytree(CORPUS / folder, copy, symlinks=True)
    repo = copy / "model_repository"
    plan, after = fix_paths([repo], vllm_version="0.32.0")
    fixed_lines: dict[str, set[int]] = {}
    for diagnostic, _ in plan.applied:
        fixed_lines.setdefault(str(Path(diagnostic.file).resolve()), set()).add(diagnostic.line)
    moved = {move.path: move.target for move in plan.moves}  # edited where it was, then moved
    for path, (old, new) in plan.texts.items():
        assert moved.get(path, path).read_text(encoding="utf-8-sig") == new
        matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines())
        changed = {i + 1 for tag, i1, i2, _, _ in matcher.get_opcodes() if tag != "equal" for i in range(i1, i2)}
        assert changed <= fixed_lines[str(path.resolve())], (path, changed)  # nothing else in the file moved
    fixed = {(d.code, d.file, d.line) for d, _ in plan.applied}
    left = {(d.code, d.file, d.line) for d in after.diagnostics}
    assert not fixed & left, fixed & left  # what was fixed is no longer found


@pytest.mark.parametrize("folder", [p.name for p in folders()])
def test_fix_then_upgrade_on_a_copy_leaves_only_what_needs_a_person(folder, tmp_path):
    """--fix, then upgrade --to 0.32.0: the lines changed are those of the keys migrated; a repository whose every
    error had a mechanical answer validates clean; no migrated key is reported afterwards."""
    import difflib
    import shutil

    from vllm_repo.upgrade import upgrade_paths
    from vllm_repo.validate import fix_paths

    copy = tmp_path / folder
    shutil.copytree(CORPUS / folder, copy, symlinks=True)
    repo = copy / "model_repository"
    before = validate_paths([repo], vllm_version="0.32.0")
    fix_paths([repo], vllm_version="0.32.0")
    result = upgrade_paths([repo], to="0.32.0")
    migrated = {(str(m.doc.path), c.key) for m in result.migrations for c in m.changes if c.action != "manual"}
    for migration in result.migrations:
        path = migration.doc.path
        if path not in result.plan.texts:
            continue
        old, new = result.plan.texts[path]
        assert path.read_text(encoding="utf-8-sig") == new
        keys = {c.key for c in migration.changes if c.action != "manual"}
        # A key's lines run from the end of the member before it (whose comma may go) to the end of its value.
        members = sorted(migration.doc.key_spans.items(), key=lambda item: item[1][0].start)
        allowed: set[int] = set()
        for i, (key, (key_span, value_span)) in enumerate(members):
            if key in keys:
                start = members[i - 1][1][1].end if i else key_span.start
                allowed.update(range(old.count("\n", 0, start) + 1, old.count("\n", 0, value_span.end) + 2))
        matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines())
        changed = {i + 1 for tag, i1, i2, _, _ in matcher.get_opcodes() if tag != "equal" for i in range(i1, i2)}
        assert changed <= allowed, (path, changed, allowed)
    after = result.remaining
    for d in after.diagnostics:
        assert d.fix is None, d.text()  # --fix took everything with one answer
        assert not any(
            d.file and Path(d.file).resolve() == Path(p).resolve() and f"'{k}'" in d.message for p, k in migrated
        ), d.text()
    mechanical = all(
        d.fix is not None or (d.code == "VR302" and any(f"'{k}'" in d.message for _, k in migrated))
        for d in before.diagnostics
        if d.severity.value == "error"
    )
    if mechanical and not result.needs_user:
        assert not after.has_errors, [d.text() for d in after.diagnostics if d.severity.value == "error"]
