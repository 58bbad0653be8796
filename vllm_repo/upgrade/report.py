"""The upgrade report people read: per file, what happened to each key and which defaults change under it; then
whether the bundled backend drives the release, and what validate still finds."""

from __future__ import annotations

from vllm_repo.validate.diagnostics import display_path

_VERB = {
    "renamed": "renamed",
    "rewritten": "rewritten",
    "moved": "moved",
    "removed": "removed",
    "manual": "left for you",
    "note": "note",
}


def report_lines(result, *, written: bool) -> list[str]:  # result: vllm_repo.upgrade.UpgradeResult
    lines = [f"upgrading to vLLM {result.target} ({result.target_reason})"]
    for migration in result.migrations:
        path = display_path(migration.doc.path)
        head = f"{path}: from vLLM {migration.source} ({migration.source_reason})"
        if not migration.changes and not migration.defaults:
            lines.append(f"{head}: nothing to change")
            continue
        lines.append(head)
        for change in migration.changes:
            lines.append(f"  {_VERB[change.action]} {change.key}: {change.detail}")
        if migration.defaults:
            lines.append(f"  defaults that change under keys the file does not set ({len(migration.defaults)}):")
            lines.extend(f"    {d.text()}" for d in migration.defaults)
    for path, why in result.skipped:
        lines.append(f"{display_path(path)}: not changed: {why}")
    supported, text = result.backend
    lines.append(f"backend: {text}" if supported else f"backend: not supported: {text}")
    if result.plan.changes:
        count = len(result.plan.texts)
        lines.append(f"{'wrote' if written else 'would write'} {count} file{'s' if count != 1 else ''}")
    return lines
