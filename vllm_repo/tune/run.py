"""A whole tune: size the candidate space, start one server on a copy of the model, measure candidates in the
search's order by reloading the model through Triton's model-control API, stop the server, and make the evidence.

``tune(spec)`` returns a TuneResult: the evidence (tune.json's content), the winner, and the files ``--write`` changes
(write.py makes and writes them). Ctrl-C and the time budget end the search between (or during) candidates: the
server's process group is stopped, and the evidence holds what was measured. A run resumed from that evidence
(``spec.resume``) takes its measured candidates as they are and measures only the others.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_repo.benchmark import BenchError, BenchSpec, bench
from vllm_repo.benchmark.run import Progress
from vllm_repo.repository import ModelDirectory, VersionDirectory
from vllm_repo.serve import launch_plan
from vllm_repo.tune import server as tune_server
from vllm_repo.tune.candidates import CandidateFiles, find_model
from vllm_repo.tune.errors import TuneError
from vllm_repo.tune.evidence import (
    FORMAT,
    TUNE_FILE,
    CandidateRecord,
    Defaults,
    Measurement,
    RunConditions,
    TuneEvidence,
    Winner,
    measurement,
)
from vllm_repo.tune.search import Outcome, Search, SearchStopped, pareto_front
from vllm_repo.tune.sizing import Sizer, gpu_for, load_concurrency, make_axes, tokens_per_request
from vllm_repo.tune.space import Axes, Candidate
from vllm_repo.tune.spec import DEFAULT_CONCURRENCY, TuneSpec

__all__ = ["TuneResult", "TuneRun", "TuneSpec", "resumed_candidates", "tune"]


@dataclasses.dataclass
class TuneResult:
    evidence: TuneEvidence
    model: ModelDirectory
    version: VersionDirectory
    winner: Candidate | None
    original_args: dict[str, Any]
    interrupted: bool = False


def tune(spec: TuneSpec, *, say: Callable[[str], None] | None = None, progress: Progress | None = None) -> TuneResult:
    """Tune ``spec.model`` of ``spec.repository`` (see the module's docstring). ``say`` gets a line per step."""
    return TuneRun(spec, say, progress).run()


class TuneRun:
    """One tune, from the user's model to the evidence: what it has sized and measured so far, and the server it
    measures on. ``run()`` does it all; ``size`` and ``measure`` are what the search calls for each candidate."""

    def __init__(self, spec: TuneSpec, say: Callable[[str], None] | None, progress: Progress | None) -> None:
        self.spec, self.say, self.progress = spec, say, progress
        self.started_at = time.monotonic()
        self.deadline = self.started_at + spec.budget_minutes * 60 if spec.budget_minutes else None
        self.server: tune_server.ModelServer | None = None
        self.servers_started = 0  # Triton servers started: each ModelServer, and those it started anew
        self.records: dict[tuple, CandidateRecord] = {}  # every candidate sized out or measured, by key
        self.durations: list[float] = []  # each measurement's time, for what the budget has room for
        self.notes: list[str] = []
        self.earlier: dict[tuple, CandidateRecord] = {}  # taken from the tune.json resumed from
        self.resume: Path | None = None

    def note(self, message: str) -> None:
        if self.say:
            self.say(message)

    def run(self) -> TuneResult:
        self.spec.check()
        self.model, self.version, self.original = find_model(self.spec.repository, self.spec.model)
        scratch = tune_server.temporary_directory()
        try:
            self._prepare(scratch)
            self._drop_unfit_batching()
            search, stopped = self._search()
            return self._result(search, stopped)
        finally:
            if self.server is not None:
                self.server.stop()
            shutil.rmtree(scratch, ignore_errors=True)

    # -----------------------------------------------------------------------------------------------------------------
    # Before anything is measured
    # -----------------------------------------------------------------------------------------------------------------

    def _prepare(self, scratch: Path) -> None:
        """The work copy and its launch plan, the sizer, the axes to search, and what a resumed run takes."""
        from vllm_repo.releases.memory_budget import resolve_release
        from vllm_repo.schema.loader import schema_for_release
        from vllm_repo.serve.ports import free_ports
        from vllm_repo.settings import resolve_settings

        spec = self.spec
        project = resolve_settings(spec.repository, gpu=spec.gpu, num_gpus=spec.num_gpus)
        root = tune_server.work_copy(self.model.path, scratch)
        self.files = CandidateFiles(self.model, self.version, self.original, root / self.model.name)
        host = "127.0.0.1"
        http_port, grpc_port, metrics_port = free_ports(3, host)
        self.plan = launch_plan.prepare_launch(
            root, host=host, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, python=spec.python
        )
        vllm_version = self.plan.python.vllm_version
        self.notes = list(self.plan.notes)
        gpu, num_gpus, where_notes = gpu_for(project, launch_plan.has_nvidia_gpu())
        self.notes += where_notes
        cpu_kv = None
        if gpu is None:
            space = self.plan.env.get("VLLM_CPU_KVCACHE_SPACE") or os.environ.get("VLLM_CPU_KVCACHE_SPACE") or "4"
            cpu_kv = int(float(space) * 2**30)
        per_request, approximate = tokens_per_request(spec)
        self.sizer = Sizer(
            self.original, self.version.path, vllm_version, gpu, cpu_kv, load_concurrency(spec), per_request
        )
        release, _ = resolve_release(vllm_version)
        schema = schema_for_release(release.version.base_version)
        self.sizer.size(Candidate())  # reads the model's facts, or says why it cannot
        schema_keys = set(schema.fields) if schema else set()
        self.axes: Axes
        self.axes, axis_notes = make_axes(spec, self.original, self.sizer, schema_keys, release, num_gpus)
        self.notes += axis_notes
        if approximate:
            self.notes.append("the dataset's prompts are counted at about four bytes a token for the KV-cache check")
        self.conditions = self._conditions(vllm_version)
        self.resume = self.model.path / TUNE_FILE if spec.resume is True else spec.resume or None
        if self.resume is not None:
            self.earlier = resumed_candidates(self.resume, self.conditions)
            self.notes.append(
                f"resumed from {self.resume}: its {len(self.earlier)} measured candidate(s) are not measured again"
            )

    def _conditions(self, vllm_version: str | None) -> RunConditions:
        """What this run's measurements depend on besides the candidate's own settings."""
        spec = self.spec
        return RunConditions(
            model=self.model.name,
            version=self.version.path.name,
            base_args=self.original,
            vllm_version=vllm_version,
            sized=self.sizer.where,
            slo=spec.slo.given(),
            load=spec.loads(),
            input_len=None if spec.dataset else spec.input_len,
            output_len=spec.output_len if spec.dataset else spec.output_tokens,
            dataset=str(spec.dataset) if spec.dataset else None,
            num_prompts=spec.num_prompts,
            seed=spec.seed,
        )

    def _drop_unfit_batching(self) -> None:
        """The batching grid is sized before anything starts; what it drops is on record whether or not the search
        would have come to it."""
        for seqs in [None, *self.axes.max_num_seqs]:
            for tokens in [None, *self.axes.max_num_batched_tokens]:
                stage = "defaults" if seqs is None and tokens is None else "batching grid"
                candidate = Candidate.of({"max_num_seqs": seqs, "max_num_batched_tokens": tokens}, stage=stage)
                verdict = self.sizer.size(candidate)
                if verdict.dropped:
                    self.record(candidate, "dropped")
                    self.note(f"dropped before starting: {candidate.name}: {verdict.dropped}")
        if self.sizer.size(Candidate()).dropped:
            self.notes.append("vLLM's defaults do not fit the load: the margin over them is not measured")

    def record(
        self,
        candidate: Candidate,
        status: str,
        figures: Measurement | None = None,
        *,
        reason: str | None = None,
        load_s: float | None = None,
        measure_s: float | None = None,
        reused: bool = False,
    ) -> None:
        """The candidate's entry in the evidence, with its sizing (and why the estimator dropped it, unless
        ``reason`` says why it failed)."""
        sizing = self.sizer.size(candidate)
        self.records[candidate.key()] = CandidateRecord(
            candidate.name, candidate.stage, candidate.settings, candidate.instances, status,
            reason=reason if reason is not None else sizing.dropped, sizing=sizing.to_json(), figures=figures,
            load_s=load_s, measure_s=measure_s, reused=reused,
        )  # fmt: skip

    # -----------------------------------------------------------------------------------------------------------------
    # What the search calls
    # -----------------------------------------------------------------------------------------------------------------

    def size(self, candidate: Candidate) -> str | None:
        verdict = self.sizer.size(candidate)
        if verdict.dropped and candidate.key() not in self.records:
            self.record(candidate, "dropped")
            self.note(f"dropped: {candidate.name}: {verdict.dropped}")
        return verdict.dropped

    def measure(self, candidate: Candidate) -> Outcome | None:
        again = candidate.stage == "confirm"  # the search's best, measured once more
        taken = None if again else self.earlier.get(candidate.key())
        if taken is not None:
            return self._take(candidate, taken)
        now = time.monotonic()
        if self.deadline is not None:
            expected = sum(self.durations) / len(self.durations) if self.durations else 0.0
            if now + expected > self.deadline:
                raise SearchStopped("budget")
        began = now
        self.note(f"candidate {len(self.durations) + 1}: {candidate.name} ({candidate.stage}): loading")
        self.files.write(candidate)
        failure = self._load()
        loaded_s = time.monotonic() - began
        if failure:
            self._keep(candidate, again, "failed", reason=f"did not load: {failure[:2000]}", load_s=round(loaded_s, 1))
            self.note(f"  failed to load: {failure.splitlines()[0][:300]}")
            self.durations.append(time.monotonic() - began)
            return None
        assert self.server is not None
        try:
            run = bench(self._bench_spec(self.server.grpc_url), self.progress)
        except BenchError as exc:  # the server stopped answering mid-measurement: the next one gets a new one
            self._keep(candidate, again, "failed", reason=f"{exc}", load_s=round(loaded_s, 1))
            self.note(f"  failed: {exc}; starting a new server")
            self.servers_started += self.server.restarts
            self.server.stop()
            self.server = None
            self.durations.append(time.monotonic() - began)
            return None
        for line in run.notes:  # what bench found about the prompts (the same for every candidate): once
            if line not in self.notes:
                self.notes.append(line)
                self.note(line)
        figures = measurement(run.points)
        load_s, measure_s = round(loaded_s, 1), round(time.monotonic() - began - loaded_s, 1)
        if run.interrupted:
            if not again:  # an interrupted repeat is dropped: the first measurement stands alone
                self.record(candidate, "interrupted", figures, load_s=load_s, measure_s=measure_s)
            raise SearchStopped("interrupted")
        self.durations.append(time.monotonic() - began)
        if not figures.points or all(p["completed"] == 0 for p in figures.points):
            failed = "every request failed"
            self._keep(candidate, again, "failed", figures, reason=failed, load_s=load_s, measure_s=measure_s)
            return None
        self._keep(candidate, again, "measured", figures, load_s=load_s, measure_s=measure_s)
        self.note(
            f"  goodput {figures.goodput_rps:g} req/s, p99 end-to-end {figures.e2e_p99_ms:g} ms, "
            f"SLO {'met' if figures.slo_met else 'missed'}"
        )
        return Outcome(figures.goodput_rps or 0.0, figures.e2e_p99_ms or math.inf)

    def _take(self, candidate: Candidate, taken: CandidateRecord) -> Outcome:
        """A candidate measured by the run resumed from, taken as it was."""
        figures = taken.figures
        assert figures is not None and figures.goodput_rps is not None and figures.e2e_p99_ms is not None
        self.record(candidate, "measured", figures, load_s=taken.load_s, measure_s=taken.measure_s, reused=True)
        self.note(
            f"{candidate.name} ({candidate.stage}): measured before ({self.resume}): goodput {figures.goodput_rps:g} "
            "req/s"
        )
        return Outcome(figures.goodput_rps, figures.e2e_p99_ms)

    def _keep(
        self,
        candidate: Candidate,
        again: bool,
        status: str,
        figures: Measurement | None = None,
        *,
        reason: str | None = None,
        load_s: float,
        measure_s: float | None = None,
    ) -> None:
        """A measurement's outcome: the candidate's entry, or, measured again, one more run of its entry."""
        if again:  # the first measurement's entry stays; this one joins it, the score their mean
            self.records[candidate.key()].add_run(status, figures, reason=reason, load_s=load_s, measure_s=measure_s)
        else:
            self.record(candidate, status, figures, reason=reason, load_s=load_s, measure_s=measure_s)

    def _load(self) -> str | None:
        """The candidate's files loaded (a server started first where there is none); Triton's reason it could not
        load them, or None."""
        spec = self.spec
        try:
            if self.server is None:
                self.server = tune_server.ModelServer(self.plan, self.model.name, spec.log_path)
                self.servers_started += 1
                self.server.start(spec.ready_timeout)
            return self.server.reload(spec.ready_timeout)
        except KeyboardInterrupt:
            raise SearchStopped("interrupted") from None

    def _bench_spec(self, url: str) -> BenchSpec:
        spec = self.spec
        return BenchSpec(
            model=self.model.name, url=url,
            concurrency=spec.concurrency or (None if spec.request_rates else [DEFAULT_CONCURRENCY]),
            request_rates=spec.request_rates, num_prompts=spec.num_prompts, input_len=spec.input_len,
            output_len=spec.output_len, dataset=spec.dataset, slo=spec.slo, seed=spec.seed, warmup=spec.warmup,
            wait_s=60.0,
        )  # fmt: skip

    # -----------------------------------------------------------------------------------------------------------------
    # The search and its outcome
    # -----------------------------------------------------------------------------------------------------------------

    def _search(self) -> tuple[Search, str | None]:
        """The search run to its end or its stop; why it stopped (None: it ended)."""
        spec = self.spec
        search = Search(self.axes, self.size, self.measure, confirmations=0 if spec.grid else spec.confirm)
        stopped: str | None = None
        try:
            search.grid() if spec.grid else search.run()
        except SearchStopped as stop:
            stopped = stop.reason
        except KeyboardInterrupt:
            stopped = "interrupted"
        finally:
            if self.server is not None:
                self.note("stopping the server")
                self.server.stop()
        return search, stopped

    def _result(self, search: Search, stopped: str | None) -> TuneResult:
        evidence = self._evidence(search, stopped)
        winner = search.best if stopped != "interrupted" else None
        if stopped == "interrupted":
            evidence.winner = None
        # A best measured once, where the search meant to measure it again: --write does not take it.
        evidence.confirmed = winner is not None and (
            not search.confirmations or len(search.repeats.get(winner.key(), ())) > 1
        )
        if winner is not None and not evidence.confirmed:
            evidence.notes.append(self._unconfirmed_note(winner.name, stopped))
            winner = None
        interrupted = stopped == "interrupted"
        return TuneResult(evidence, self.model, self.version, winner, self.original, interrupted=interrupted)

    def _unconfirmed_note(self, name: str, stopped: str | None) -> str:
        confirm = self.spec.confirm
        if stopped == "budget":
            why = f"the time budget ended the run before it was measured again (--confirm {confirm})"
            fix = "more --budget-minutes confirms it"
        else:  # the confirmations were spent: a best measured again fell below it
            why = (
                f"the {confirm} confirmation(s) of --confirm {confirm} were spent on candidates whose mean of two "
                "measurements fell below it"
            )
            fix = f"--confirm {confirm + 1} measures it again"
        return (
            f"the best, {name}, was measured once: {why}; not written, model.json is kept ({fix}; --confirm 0 takes "
            "a best measured once)"
        )

    def _evidence(self, search: Search, stopped: str | None) -> TuneEvidence:
        candidates = list(self.records.values())
        measured = [c for c in candidates if c.status == "measured"]
        front = pareto_front([(c.name, Outcome(c.goodput_rps or 0.0, c.latency_ms or math.inf)) for c in measured])
        for c in candidates:
            c.pareto = c.name in front
        defaults = self.records.get(Candidate().key())
        measured_defaults = defaults if defaults is not None and defaults.status == "measured" else None
        best = search.best
        winner = self.records.get(best.key()) if best is not None else None
        margin = None
        if winner and measured_defaults is not None and measured_defaults.goodput_rps:
            margin = round((winner.goodput_rps or 0.0) / measured_defaults.goodput_rps, 3)
        self.servers_started += self.server.restarts if self.server is not None else 0
        return TuneEvidence(
            conditions=self.conditions,
            date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            wall_s=round(time.monotonic() - self.started_at, 1),
            stopped=stopped,
            notes=self.notes,
            search="grid" if self.spec.grid else "coarse to fine",
            measurements=len(
                [c for c in candidates if c.status in ("measured", "failed", "interrupted") and not c.reused]
            )
            + sum(max(len(c.runs) - 1, 0) for c in candidates),
            reused=len([c for c in candidates if c.reused]),
            candidates=candidates,
            pareto_front=front,
            winner=None
            if winner is None
            else Winner(winner.name, winner.settings, winner.instances, winner.goodput_rps or 0.0, winner.latency_ms),
            defaults=None
            if measured_defaults is None
            else Defaults(measured_defaults.goodput_rps or 0.0, measured_defaults.latency_ms),
            margin_over_defaults=margin,
            resumed_from=str(self.resume) if self.resume is not None else None,
            server_restarts=max(self.servers_started - 1, 0),
        )


def resumed_candidates(path: Path, conditions: RunConditions) -> dict[tuple, CandidateRecord]:
    """The measured candidates of the tune.json at ``path`` that this run takes, by candidate key."""
    try:
        previous = json.loads(path.read_text())
    except FileNotFoundError:
        raise TuneError(f"{path}: no such file to resume from", hint="run tune without --resume first") from None
    except (OSError, ValueError) as exc:
        raise TuneError(f"{path}: not a tune.json that can be read ({exc})", hint="run without --resume") from None
    if not isinstance(previous, dict) or previous.get("format") != FORMAT:
        raise TuneError(f"{path}: not a tune.json of this vllm-repo", hint="run without --resume")
    differing = conditions.differing(previous)
    if differing:
        shown = ", ".join(f"{key} ({_short(previous.get(key))} there)" for key in differing)
        raise TuneError(
            f"{path} measured another run: {shown}",
            hint="resume with the options of that run, or run without --resume to measure afresh",
        )
    taken = [c for c in TuneEvidence.from_json(previous).candidates if c.has_score]
    return {Candidate.of(c.settings, c.instances).key(): c for c in taken}


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
