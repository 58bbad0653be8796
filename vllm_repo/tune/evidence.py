"""tune.json, the evidence tune keeps beside the model (``<model>/tune.json``): the SLO and the load, every candidate
it sized or measured (its settings, and its measurements or why it was dropped), the Pareto front, the winner and
its margin over vLLM's defaults, and the settings it wrote into model.json.

The file is a ``TuneEvidence`` written by ``to_json`` and read back by ``from_json``; the run, the report and the CLI
read its attributes, never the JSON's keys. validate reads ``written`` back (rule VR510) to tell when model.json no
longer has the tuned settings; that reading is vllm_repo.repository.tune_record's, which other commands import
without this package.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from vllm_repo.repository.tune_record import TUNE_FILE

__all__ = [
    "FORMAT", "LATENCY", "TUNE_FILE", "CandidateRecord", "Defaults", "Measurement", "RunConditions", "RunRecord",
    "TuneEvidence", "Winner", "Written", "measurement",
]  # fmt: skip
FORMAT = 1
# The latency the Pareto front and the tie-break use: the p99 of end-to-end latency, which holds TTFT and ITL both.
LATENCY = "e2e_p99_ms"


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _without_none(pairs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in pairs.items() if v is not None}


@dataclasses.dataclass
class RunConditions:
    """What makes two runs' measurements comparable: the same model.json to start from, engine release, GPU, SLO,
    load and prompts. A run resumed from a tune.json takes its measured candidates only where every one is the same."""

    model: str
    version: str
    base_args: dict[str, Any]
    vllm_version: str | None
    sized: str
    slo: dict[str, float]
    load: dict[str, list[Any]]
    input_len: int | None
    output_len: int | None
    dataset: str | None
    num_prompts: int
    seed: int

    def to_json(self) -> dict[str, Any]:
        # JSON's view, as the file has it: tuples become lists.
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def differing(self, previous: dict[str, Any]) -> list[str]:
        """The conditions a tune.json's object (as read) has otherwise than this run."""
        mine = self.to_json()
        return [f.name for f in dataclasses.fields(self) if previous.get(f.name) != mine[f.name]]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunConditions:
        return cls(
            model=_str(data.get("model")) or "",
            version=_str(data.get("version")) or "",
            base_args=_object(data.get("base_args")),
            vllm_version=_str(data.get("vllm_version")),
            sized=_str(data.get("sized")) or "",
            slo={k: float(v) for k, v in _object(data.get("slo")).items() if _number(v) is not None},
            load={k: list(v) for k, v in _object(data.get("load")).items() if isinstance(v, list)},
            input_len=_int(data.get("input_len")),
            output_len=_int(data.get("output_len")),
            dataset=_str(data.get("dataset")),
            num_prompts=_int(data.get("num_prompts")) or 0,
            seed=_int(data.get("seed")) or 0,
        )


@dataclasses.dataclass
class Measurement:
    """A candidate's figures from bench's load points: the point with the best goodput stands for it. Without
    points (nothing answered) only ``points`` is there, and no goodput or latency."""

    goodput_rps: float | None
    e2e_p99_ms: float | None
    points: list[dict[str, Any]]
    ttft_p99_ms: float | None = None
    itl_p99_ms: float | None = None
    output_tokens_per_s: float | None = None
    slo_met: bool | None = None
    failed: int | None = None

    def to_json(self) -> dict[str, Any]:
        if not self.points:
            return {"goodput_rps": self.goodput_rps, LATENCY: self.e2e_p99_ms, "points": self.points}
        return {
            "goodput_rps": self.goodput_rps,
            LATENCY: self.e2e_p99_ms,
            "ttft_p99_ms": self.ttft_p99_ms,
            "itl_p99_ms": self.itl_p99_ms,
            "output_tokens_per_s": self.output_tokens_per_s,
            "slo_met": self.slo_met,
            "failed": self.failed,
            "points": self.points,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement | None:
        """The figures of a candidate's entry, None where it has none."""
        if "points" not in data and "goodput_rps" not in data:
            return None
        points = data.get("points")
        slo_met = data.get("slo_met")
        return cls(
            goodput_rps=_number(data.get("goodput_rps")),
            e2e_p99_ms=_number(data.get(LATENCY)),
            points=[p for p in points if isinstance(p, dict)] if isinstance(points, list) else [],
            ttft_p99_ms=_number(data.get("ttft_p99_ms")),
            itl_p99_ms=_number(data.get("itl_p99_ms")),
            output_tokens_per_s=_number(data.get("output_tokens_per_s")),
            slo_met=slo_met if isinstance(slo_met, bool) else None,
            failed=_int(data.get("failed")),
        )


def measurement(points: list[dict[str, Any]]) -> Measurement:
    """A candidate's figures from bench's load points (bench's report of each): the best goodput stands for it."""
    if not points:
        return Measurement(None, None, [])
    best = max(points, key=lambda p: (p.get("goodput_rps") or 0.0, -(p["e2e_ms"]["p99"] or float("inf"))))
    return Measurement(
        goodput_rps=best.get("goodput_rps") or 0.0,
        e2e_p99_ms=best["e2e_ms"]["p99"],
        points=points,
        ttft_p99_ms=best["ttft_ms"]["p99"],
        itl_p99_ms=best["itl_ms"]["p99"],
        output_tokens_per_s=best["output_tokens_per_s"],
        slo_met=best.get("slo_met"),
        failed=best["failed"],
    )


@dataclasses.dataclass
class RunRecord:
    """One measurement of a candidate measured more than once (the search's confirmation). ``status``: None for a
    measured run, else why it scored nothing (failed)."""

    goodput_rps: float
    e2e_p99_ms: float | None
    ttft_p99_ms: float | None = None
    itl_p99_ms: float | None = None
    output_tokens_per_s: float | None = None
    slo_met: bool | None = None
    failed: int | None = None
    load_s: float | None = None
    measure_s: float | None = None
    reason: str | None = None
    status: str | None = None

    def to_json(self) -> dict[str, Any]:
        shown = _without_none(dataclasses.asdict(self))
        return {"goodput_rps": self.goodput_rps, LATENCY: self.e2e_p99_ms, **shown}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        slo_met = data.get("slo_met")
        return cls(
            goodput_rps=_number(data.get("goodput_rps")) or 0.0,
            e2e_p99_ms=_number(data.get(LATENCY)),
            ttft_p99_ms=_number(data.get("ttft_p99_ms")),
            itl_p99_ms=_number(data.get("itl_p99_ms")),
            output_tokens_per_s=_number(data.get("output_tokens_per_s")),
            slo_met=slo_met if isinstance(slo_met, bool) else None,
            failed=_int(data.get("failed")),
            load_s=_number(data.get("load_s")),
            measure_s=_number(data.get("measure_s")),
            reason=_str(data.get("reason")),
            status=_str(data.get("status")),
        )


@dataclasses.dataclass
class CandidateRecord:
    """One candidate's entry. status: measured, dropped (by the estimator), failed (to load, or every request
    failed), interrupted (Ctrl-C while it was measured: what it got so far)."""

    name: str
    stage: str
    settings: dict[str, Any]
    instances: int
    status: str
    reason: str | None = None
    sizing: dict[str, Any] = dataclasses.field(default_factory=dict)
    figures: Measurement | None = None
    load_s: float | None = None
    measure_s: float | None = None
    reused: bool = False  # taken as measured from the tune.json the run resumed from
    runs: list[RunRecord] = dataclasses.field(default_factory=list)  # each measurement, once measured again
    pareto: bool = False

    @property
    def goodput_rps(self) -> float | None:
        return self.figures.goodput_rps if self.figures is not None else None

    @property
    def latency_ms(self) -> float | None:
        return self.figures.e2e_p99_ms if self.figures is not None else None

    @property
    def has_score(self) -> bool:
        """Measured, with the goodput and latency a search ranks it by (a file edited by hand may lack them)."""
        return self.status == "measured" and self.goodput_rps is not None and self.latency_ms is not None

    def add_run(
        self,
        status: str,
        figures: Measurement | None = None,
        *,
        reason: str | None = None,
        load_s: float | None = None,
        measure_s: float | None = None,
    ) -> None:
        """A measured candidate measured again (the search's confirmation): each measurement's figures go under
        ``runs`` (the first's included), and the entry's goodput and latency become their means. A run that failed
        scores no goodput, at the first run's latency."""
        assert self.figures is not None, "only a measured candidate is measured again"
        if not self.runs:
            self.runs.append(self._run(self.figures, None, self.load_s, self.measure_s))
        run = self._run(figures, reason, load_s, measure_s)
        if status != "measured":
            run.status, run.goodput_rps, run.e2e_p99_ms = status, 0.0, self.runs[0].e2e_p99_ms
        self.runs.append(run)
        self.figures.goodput_rps = round(sum(r.goodput_rps for r in self.runs) / len(self.runs), 4)
        self.figures.e2e_p99_ms = round(sum(r.e2e_p99_ms or 0.0 for r in self.runs) / len(self.runs), 3)

    @staticmethod
    def _run(
        figures: Measurement | None, reason: str | None, load_s: float | None, measure_s: float | None
    ) -> RunRecord:
        if figures is None:
            return RunRecord(0.0, None, reason=reason, load_s=load_s, measure_s=measure_s)
        return RunRecord(
            goodput_rps=figures.goodput_rps or 0.0,
            e2e_p99_ms=figures.e2e_p99_ms,
            ttft_p99_ms=figures.ttft_p99_ms,
            itl_p99_ms=figures.itl_p99_ms,
            output_tokens_per_s=figures.output_tokens_per_s,
            slo_met=figures.slo_met,
            failed=figures.failed,
            reason=reason,
            load_s=load_s,
            measure_s=measure_s,
        )

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name,
            "stage": self.stage,
            "settings": self.settings,
            "instances": self.instances,
            "status": self.status,
            "reason": self.reason,
            "sizing": self.sizing,
        }
        if self.figures is not None:
            entry.update(self.figures.to_json())
        entry.update(_without_none({"load_s": self.load_s, "measure_s": self.measure_s}))
        if self.reused:
            entry["reused"] = True
        if self.runs:
            entry["runs"] = [r.to_json() for r in self.runs]
        entry["pareto"] = self.pareto
        return entry

    @classmethod
    def from_json(cls, data: Any) -> CandidateRecord | None:
        """An entry as read from a tune.json; None where it is not one (a file edited by hand)."""
        if not isinstance(data, dict) or not isinstance(data.get("settings"), dict):
            return None
        runs = data.get("runs")
        return cls(
            name=_str(data.get("name")) or "",
            stage=_str(data.get("stage")) or "",
            settings=data["settings"],
            instances=_int(data.get("instances")) or 1,
            status=_str(data.get("status")) or "",
            reason=_str(data.get("reason")),
            sizing=_object(data.get("sizing")),
            figures=Measurement.from_json(data),
            load_s=_number(data.get("load_s")),
            measure_s=_number(data.get("measure_s")),
            reused=data.get("reused") is True,
            runs=[RunRecord.from_json(r) for r in runs if isinstance(r, dict)] if isinstance(runs, list) else [],
            pareto=data.get("pareto") is True,
        )


@dataclasses.dataclass
class Winner:
    name: str
    settings: dict[str, Any]
    instances: int
    goodput_rps: float
    e2e_p99_ms: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "settings": self.settings,
            "instances": self.instances,
            "goodput_rps": self.goodput_rps,
            LATENCY: self.e2e_p99_ms,
        }

    @classmethod
    def from_json(cls, data: Any) -> Winner | None:
        if not isinstance(data, dict):
            return None
        return cls(
            name=_str(data.get("name")) or "",
            settings=_object(data.get("settings")),
            instances=_int(data.get("instances")) or 1,
            goodput_rps=_number(data.get("goodput_rps")) or 0.0,
            e2e_p99_ms=_number(data.get(LATENCY)),
        )


@dataclasses.dataclass
class Defaults:
    """vLLM's defaults as measured: the baseline of the winner's margin."""

    goodput_rps: float
    e2e_p99_ms: float | None

    def to_json(self) -> dict[str, Any]:
        return {"goodput_rps": self.goodput_rps, LATENCY: self.e2e_p99_ms}

    @classmethod
    def from_json(cls, data: Any) -> Defaults | None:
        if not isinstance(data, dict):
            return None
        return cls(_number(data.get("goodput_rps")) or 0.0, _number(data.get(LATENCY)))


@dataclasses.dataclass
class Written:
    """What --write put into model.json: the version directory, each tuned key's value (None: removed, vLLM's
    default won) and the instances. repository/tune_record.py reads it back for validate."""

    version: str
    settings: dict[str, Any]
    instances: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Written | None:
        if not isinstance(data, dict):
            return None
        return cls(_str(data.get("version")) or "", _object(data.get("settings")), _int(data.get("instances")) or 1)


@dataclasses.dataclass
class TuneEvidence:
    """tune.json's content. ``measurements``: the measurements this run made (a confirmation's included, those
    taken from an earlier run not); ``confirmed``: whether the winner was measured again where the search meant to
    (--write takes only a confirmed one)."""

    conditions: RunConditions
    date: str
    wall_s: float
    stopped: str | None  # None, "budget" or "interrupted"
    notes: list[str]
    search: str
    measurements: int
    reused: int
    candidates: list[CandidateRecord]
    pareto_front: list[str]
    winner: Winner | None
    defaults: Defaults | None
    margin_over_defaults: float | None
    written: Written | None = None
    resumed_from: str | None = None
    server_restarts: int = 0
    confirmed: bool = False
    format: int = FORMAT
    latency: str = LATENCY

    @property
    def finished(self) -> bool:
        return self.stopped is None

    @property
    def measured(self) -> list[CandidateRecord]:
        return [c for c in self.candidates if c.status == "measured"]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            **self.conditions.to_json(),
            "latency": self.latency,
            "date": self.date,
            "wall_s": self.wall_s,
            "finished": self.finished,
            "stopped": self.stopped,
            "notes": self.notes,
            "search": self.search,
            "measurements": self.measurements,
            "reused": self.reused,
            "candidates": [c.to_json() for c in self.candidates],
            "pareto_front": self.pareto_front,
            "winner": self.winner.to_json() if self.winner is not None else None,
            "defaults": self.defaults.to_json() if self.defaults is not None else None,
            "margin_over_defaults": self.margin_over_defaults,
            "written": self.written.to_json() if self.written is not None else None,
            "resumed_from": self.resumed_from,
            "server_restarts": self.server_restarts,
            "confirmed": self.confirmed,
        }

    def dumps(self) -> str:
        """The file's text."""
        return json.dumps(self.to_json(), indent=2) + "\n"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TuneEvidence:
        """The evidence of a tune.json's object (its format checked by the caller); entries that are not a
        candidate's are left out."""
        candidates = data.get("candidates")
        records = [CandidateRecord.from_json(c) for c in candidates] if isinstance(candidates, list) else []
        stopped, front = data.get("stopped"), data.get("pareto_front")
        return cls(
            conditions=RunConditions.from_json(data),
            date=_str(data.get("date")) or "",
            wall_s=_number(data.get("wall_s")) or 0.0,
            stopped=_str(stopped),
            notes=[n for n in data.get("notes") or [] if isinstance(n, str)],
            search=_str(data.get("search")) or "",
            measurements=_int(data.get("measurements")) or 0,
            reused=_int(data.get("reused")) or 0,
            candidates=[c for c in records if c is not None],
            pareto_front=[n for n in front if isinstance(n, str)] if isinstance(front, list) else [],
            winner=Winner.from_json(data.get("winner")),
            defaults=Defaults.from_json(data.get("defaults")),
            margin_over_defaults=_number(data.get("margin_over_defaults")),
            written=Written.from_json(data.get("written")),
            resumed_from=_str(data.get("resumed_from")),
            server_restarts=_int(data.get("server_restarts")) or 0,
            confirmed=data.get("confirmed") is True,
            format=_int(data.get("format")) or 0,
            latency=_str(data.get("latency")) or LATENCY,
        )

    @classmethod
    def loads(cls, text: str) -> TuneEvidence:
        return cls.from_json(json.loads(text))
