"""`vllm-repo upgrade`: carry a repository's model.json files to another vLLM release (or to the release an NGC
container carries), say which defaults change under them, and whether the bundled backend drives that release.

The edits go through validate's fix machinery (vllm_repo.diagnostics.fixes): the files keep their layout, are written
atomically, and a file that does not parse is never touched. What is left afterwards is what validate reports for
the target release.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_repo.errors import UsageError
from vllm_repo.releases.backend_support import backend_support
from vllm_repo.repository import discover
from vllm_repo.upgrade.migrate import DefaultChange, KeyChange, Migration, plan_migration, written_for

if TYPE_CHECKING:
    from vllm_repo.diagnostics.fixes import FixPlan
    from vllm_repo.validate.runner import ValidationResult

__all__ = [
    "DefaultChange",
    "KeyChange",
    "Migration",
    "UpgradeResult",
    "resolve_target",
    "upgrade_paths",
]


@dataclasses.dataclass
class UpgradeResult:
    target: str  # the bundled release migrated to
    target_reason: str
    migrations: list[Migration]
    skipped: list[tuple[Path, str]]  # files left alone, and why
    backend: tuple[bool, str]  # does the bundled backend drive the target release, in words
    plan: FixPlan[Migration]
    remaining: ValidationResult  # validate for the target release, after the write (before it, with --diff)

    @property
    def needs_user(self) -> bool:
        return any(c.needs_user for m in self.migrations for c in m.changes)


def resolve_target(to: str | None, to_container: str | None) -> tuple[str, str]:
    """The bundled release to migrate to, and why: ``--to X.Y.Z`` or the vLLM of NGC container ``--to-container``."""
    from vllm_repo.schema.loader import choose_schema_version

    if (to is None) == (to_container is None):
        raise UsageError("say which release to upgrade to", hint="pass --to 0.32.0 or --to-container 26.08")
    origin = "--to"
    if to_container is not None:
        from vllm_repo.releases.ngc import RELEASES

        release = next((r for r in RELEASES if r.release == to_container.strip()), None)
        if release is None:
            raise UsageError(
                f"no vllm-python-py3 container {to_container!r} is known",
                hint=f"known: {RELEASES[-1].release} to {RELEASES[0].release} (YY.MM), e.g. --to-container "
                f"{RELEASES[0].release}",
            )
        to, origin = release.vllm, f"{release.image} carries vLLM"
    choice = choose_schema_version(to, origin=origin)
    return choice.schema_version, choice.reason


def upgrade_paths(
    paths: Sequence[str | Path],
    *,
    to: str | None = None,
    to_container: str | None = None,
    from_version: str | None = None,
    write: bool = True,
) -> UpgradeResult:
    """Migrate every model.json of the vLLM-backend models under ``paths`` to the target release (``write``; else
    only plan it, for a diff). ``from_version``: the release the files were written for, else, per file, the newest
    release that knows its keys."""
    from vllm_repo.diagnostics.fixes import plan
    from vllm_repo.schema.loader import choose_schema_version, load_schema
    from vllm_repo.validate.runner import validate_paths

    target, reason = resolve_target(to, to_container)
    target_schema = load_schema(target)
    given_source = choose_schema_version(from_version, origin="--from").schema_version if from_version else None
    migrations: list[Migration] = []
    skipped: list[tuple[Path, str]] = []
    for repo in discover([Path(p) for p in paths]):
        for model in repo.selected:
            if not model.uses_vllm_backend:
                continue
            for _, doc in model.engine_args_documents():
                if not doc.ok or not isinstance(doc.data, dict):
                    skipped.append((doc.path, "it is not a readable JSON object (validate says why)"))
                    continue
                if doc.duplicate_keys:
                    skipped.append((doc.path, f"it repeats the key '{doc.duplicate_keys[0][0]}'"))
                    continue
                source, why = (given_source, "--from") if given_source else written_for(doc.data, target)
                migrations.append(plan_migration(doc, load_schema(source), target_schema, why))
    fixes = plan((m, m.fix) for m in migrations if m.fix is not None)
    if write and fixes.changes:
        fixes.write()
    remaining = validate_paths(list(paths), vllm_version=target)
    return UpgradeResult(target, reason, migrations, skipped, backend_support(target), fixes, remaining)
