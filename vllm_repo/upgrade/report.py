"""The upgrade report people read: per file, what happened to each key and which defaults change under it; then
whether the bundled backend drives the release, and what validate still finds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_repo.diagnostics.diagnostic import display_path

if TYPE_CHECKING:
    from vllm_repo.upgrade import UpgradeResult


def report_lines(result: UpgradeResult, *, written: bool) -> list[str]:
    lines = [f"upgrading to vLLM {result.target} ({result.target_reason})"]
    for migration in result.migrations:
        path = display_path(migration.doc.path)
        head = f"{path}: from vLLM {migration.source} ({migration.source_reason})"
        if not migration.changes and not migration.defaults:
            lines.append(f"{head}: nothing to change")
            continue
        lines.append(head)
        for change in migration.changes:
            verb = "left for you" if change.needs_user else change.action
            lines.append(f"  {verb} {change.key}: {change.detail}")
        if migration.defaults:
            lines.append(f"  defaults that change under keys the file does not set ({len(migration.defaults)}):")
            lines.extend(f"    {d.text()}" for d in migration.defaults)
    for skipped, why in result.skipped:
        lines.append(f"{display_path(skipped)}: not changed: {why}")
    supported, text = result.backend
    lines.append(f"backend: {text}" if supported else f"backend: not supported: {text}")
    if result.plan.changes:
        count = len(result.plan.texts)
        lines.append(f"{'wrote' if written else 'would write'} {count} file{'s' if count != 1 else ''}")
    return lines
