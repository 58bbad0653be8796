"""How a benchmark is shown: a progress bar on a terminal while it runs, then a table (text) or one JSON object."""

from __future__ import annotations

import json
import math
import time
from typing import Any, TextIO

from vllm_repo.benchmark.stats import RequestRecord

BAR_WIDTH = 30
ENDPOINT_WORDS = {"native": "Triton gRPC streaming", "openai": "/v1/completions", "openai-chat": "/v1/chat/completions"}


class TerminalProgress:
    """A bar per load point on a terminal (redrawn in place at most ten times a second); elsewhere one line when
    each point ends. Notes always get a line of their own."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = hasattr(out, "isatty") and out.isatty()
        self._label, self._total, self._done, self._failed = "", 0, 0, 0
        self._began = self._drawn = 0.0

    def note(self, message: str) -> None:
        print(f"note: {message}", file=self.out, flush=True)

    def start_point(self, label: str, total: int) -> None:
        self._label, self._total, self._done, self._failed = label, total, 0, 0
        self._began = time.monotonic()
        self._draw(force=True)

    def request_done(self, record: RequestRecord) -> None:
        self._done += 1
        self._failed += not record.ok
        self._draw(force=self._done == self._total)

    def end_point(self, point: dict[str, Any]) -> None:
        elapsed = time.monotonic() - self._began
        if self.tty:
            self.out.write("\r\033[K")
        if point:
            print(
                f"{self._label}: {point['completed']}/{point['requests']} done in {elapsed:.1f} s, "
                f"{point['output_tokens_per_s']:.1f} output tokens/s"
                + (f", {point['failed']} failed" * bool(point["failed"])),
                file=self.out,
                flush=True,
            )
        self.out.flush()

    def _draw(self, force: bool = False) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if not force and now - self._drawn < 0.1:
            return
        self._drawn = now
        filled = BAR_WIDTH * self._done // max(self._total, 1)
        failed = f" {self._failed} failed" if self._failed else ""
        self.out.write(
            f"\r\033[K{self._label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self._done}/{self._total} "
            f"{now - self._began:.0f} s{failed}"
        )
        self.out.flush()


def to_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2)


def _ms(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _triple(summary: dict[str, float | None]) -> str:
    return "/".join(_ms(summary[k]) for k in ("p50", "p90", "p99"))


def to_text(report: dict[str, Any]) -> str:
    """The table people read: one row per load point."""
    lines = [f"{report['model']} over {ENDPOINT_WORDS.get(report['endpoint'], report['endpoint'])} at {report['url']}"]
    lines.append(workload_line(report))
    if report["slo"]:
        lines.append("SLO: " + ", ".join(f"{k} <= {v:g}" for k, v in report["slo"].items()))
    lines.append("")
    head = ["load", "done", "failed", "req/s", "out tok/s", "TTFT ms", "ITL ms", "E2E ms"]
    if report["slo"]:
        head += ["goodput req/s", "SLO"]
    rows = [
        head,
        ["", "", "", "", "", "p50/p90/p99", "p50/p90/p99", "p50/p90/p99"] + (["", ""] if report["slo"] else []),
    ]
    for p in report["points"]:
        load = f"concurrency {p['concurrency']}" if "concurrency" in p else f"rate {p['request_rate']:g}/s"
        row = [
            load,
            str(p["completed"]),
            str(p["failed"]),
            f"{p['requests_per_s']:.2f}",
            f"{p['output_tokens_per_s']:.1f}",
            _triple(p["ttft_ms"]),
            _triple(p["itl_ms"]),
            _triple(p["e2e_ms"]),
        ]
        if report["slo"]:
            row += [f"{p['goodput_rps']:.2f}", "met" if p["slo_met"] else "missed"]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
    lines += [n for p in report["points"] if (n := client_limit_note(p, "the client")) is not None]
    lines += [f"server CPU-s/s at {label_of(p)}: {t}" for p in report["points"] if (t := server_cpu_text(p))]
    for p in report["points"]:
        for e in p["errors"]:
            lines.append(f"{label_of(p)}: {e['count']} failed: {e['error']}")
    if report["interrupted"]:
        lines.append("interrupted: the points above are those measured before the stop")
    return "\n".join(lines)


def label_of(point: dict[str, Any]) -> str:
    return f"concurrency {point['concurrency']}" if "concurrency" in point else f"rate {point['request_rate']:g}/s"


def server_cpu_text(point: dict[str, Any]) -> str | None:
    """The server's CPU seconds a second at a point, and the process roles that used them (those of 0.01 and more):
    "2.41 (tritonserver 0.90, Python backend stub 0.80, ...)"; None where the server was not measured."""
    roles = point.get("server_cpu_by_role")
    if not roles:
        return None
    parts = ", ".join(f"{role} {value:.2f}" for role, value in roles.items() if value >= 0.01)
    return f"{point['server_cpu_s_per_s']:.2f} ({parts})"


# The client's CPU seconds a second above which its own core, not the server, may be what limits a point's figures.
CLIENT_BUSY = 0.9


def client_limit_note(point: dict[str, Any], who: str) -> str | None:
    """A line saying the load generator was busy enough to be the limit at this point, or None."""
    busy = point.get("client_cpu_s_per_s")
    if busy is None or busy < CLIENT_BUSY:
        return None
    return (
        f"note: at {label_of(point)}, {who} took {busy:.2f} CPU-seconds a second: one core of the client may be what "
        "limits these figures, not the server (run the load from more processes or a faster machine)"
    )


def workload_line(report: dict[str, Any], unit: str = "load point") -> str:
    """What every request was: "synthetic prompts of exactly 128 tokens, 128 output tokens each, 100 requests per
    load point"."""
    if report["input_len"] is not None:
        length = "exactly" if report["prompts"] == "exact" else "about"
        source = f"synthetic prompts of {length} {report['input_len']} tokens"
    else:
        source = f"prompts of {report['prompts']}"
    out_len = f"{report['output_len']} output tokens each" if report["output_len"] else "the dataset's output lengths"
    return f"{source}, {out_len}, {requests_words(report['num_prompts'], unit)}"


def requests_words(num_prompts: int | list[int], unit: str = "load point") -> str:
    """'100 requests per load point', or for one number per point '16, 128, 512 requests at the load points in turn'."""
    if isinstance(num_prompts, list):
        return f"{', '.join(map(str, num_prompts))} requests at the load points in turn"
    return f"{num_prompts} requests per {unit}"
