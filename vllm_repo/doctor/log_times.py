"""When the lines of Triton's log were written: its header gives month, day and time of day, no year. Doctor times a
load that never finished by them (VD116): from the model's ready line to the log's end, or to the clock for a running
server's log."""

from __future__ import annotations

import datetime
import re

# Triton's header time (month, day, then h:m:s), to tell how long the log went on after a model's ready line.
_LOG_TIME = re.compile(r"^[IWE](?P<month>\d{2})(?P<day>\d{2}) (?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2}(?:\.\d+)?)\s")
# The header has no year. A log read without a clock ends in a leap year (February 29 has a place); one read by a
# running server's clock ends in the clock's year, or the year before where it ends in December and the clock says
# January. Walking back from its end, a month later than the next timed line's is the year before: New Year.
_LAST_YEAR_UNKNOWN = 2000


def line_times(raw: list[str], read_at: datetime.datetime | None) -> list[float | None]:
    """Each line's header time in seconds on one clock (None where it has none, or no date)."""
    headers = [_LOG_TIME.match(text) for text in raw]
    last = next((m for m in reversed(headers) if m is not None), None)
    year = _LAST_YEAR_UNKNOWN if read_at is None else read_at.year
    if read_at is not None and last is not None and int(last["month"]) == 12 and read_at.month == 1:
        year -= 1
    times: list[float | None] = [None] * len(raw)
    later_month = 13
    for index in reversed(range(len(raw))):
        m = headers[index]
        if m is None:
            continue
        month = int(m["month"])
        if month > later_month:
            year -= 1
        later_month = month
        try:
            times[index] = _seconds(year, month, int(m["day"]), int(m["h"]), int(m["m"]), float(m["s"]))
        except ValueError:  # not a date (month 13): not Triton's header
            continue
    return times


def _seconds(year: int, month: int, day: int, hours: int, minutes: int, seconds: float) -> float:
    days = datetime.date(year, month, day).toordinal()
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def log_end(times: list[float | None], read_at: datetime.datetime | None) -> tuple[float | None, bool]:
    """When the log is known to have gone on to, in line_times' clock, and whether that is the time it was read (a
    running server's log) rather than its last line. Triton writes local time, as read_at is."""
    last = next((t for t in reversed(times) if t is not None), None)
    if read_at is None:
        return last, False
    now = _seconds(
        read_at.year,
        read_at.month,
        read_at.day,
        read_at.hour,
        read_at.minute,
        read_at.second + read_at.microsecond / 1e6,
    )
    if last is not None and now < last:
        return last, False  # a clock behind the log's: its lines tell
    return now, True
