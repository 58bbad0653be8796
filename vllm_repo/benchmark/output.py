"""What bench writes: a report's text and its plot, a plain run's or a comparison's (compare_report.py and
compare_plot.py), in the file format asked for."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from vllm_repo.benchmark import compare_plot, compare_report, plot, report
from vllm_repo.files import write_atomic


def report_text(run_report: dict[str, Any]) -> str:
    """The text of a report: bench's table, or a comparison's tables."""
    if "comparison" in run_report:
        return compare_report.to_text(run_report)
    return report.to_text(run_report)


def svg(run_report: dict[str, Any]) -> str:
    if "comparison" in run_report:
        return compare_plot.comparison_svg(run_report)
    return plot.svg(run_report)


def page(run_report: dict[str, Any]) -> str:
    """An HTML page with the plot and the text table."""
    title = html.escape(f"vllm-repo bench: {run_report['model']}")
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>'
        + title
        + '</title></head>\n<body style="font-family: sans-serif">\n<h2>'
        + title
        + "</h2>\n"
        + svg(run_report)
        + "\n<pre>"
        + html.escape(report_text(run_report))
        + "</pre>\n</body></html>\n"
    )


def write_plot(path: Path, run_report: dict[str, Any]) -> None:
    write_atomic(path, svg(run_report) + "\n" if path.suffix.lower() == ".svg" else page(run_report))
