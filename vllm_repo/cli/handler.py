"""The one place errors become what the user sees and the exit code.

- a VllmRepoError (raised on purpose, vllm_repo.errors): validate's findings that explain it, then the message and
  the hint; exit 1, or 2 for a UsageError;
- anything else is a bug: one line that says so, where the traceback was written (a log file; with --debug, or
  VLLM_REPO_DEBUG=1, it is printed instead), exit 3.
"""

from __future__ import annotations

import datetime
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, NoReturn

import typer.core

from vllm_repo.errors import VllmRepoError

BUG_EXIT_CODE = 3
DEBUG_ENV = "VLLM_REPO_DEBUG"


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


class HandledGroup(typer.core.TyperGroup):
    """The root command group: every command, nested ones included, runs inside its ``invoke``."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except VllmRepoError as exc:
            report_error(exc)
        except BrokenPipeError:
            # The reader went away (`vllm-repo gpus | head`): not a bug. Further writes to the closed pipe (Python's
            # flush at exit) go to /dev/null instead of raising again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(141) from None  # what a shell reports for a process ended by SIGPIPE
        except Exception as exc:
            if _is_click_control_flow(exc):
                raise  # --help, bad options, typer.Exit with the code a command chose: click prints and exits
            report_bug(exc)


def _is_click_control_flow(exc: Exception) -> bool:
    # Typer raises click's exceptions, or those of the click it vendors (typer._click) in newer releases.
    module = type(exc).__module__
    return module.split(".")[0] in ("click", "typer")


def report_error(exc: VllmRepoError) -> NoReturn:
    from vllm_repo.cli.output import print_diagnostics

    print_diagnostics(exc.diagnostics)
    typer.echo(f"error: {exc.message}", err=True)
    if exc.hint:
        typer.echo(f"  hint: {exc.hint}", err=True)
    raise typer.Exit(exc.exit_code)


def report_bug(exc: BaseException) -> NoReturn:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if debug_enabled():
        sys.stderr.write(text)
        where = "above"
    else:
        where = str(write_crash_log(text))
    typer.echo(
        f"vllm-repo: internal error (a bug in vllm-repo, not in your files): {type(exc).__name__}: {exc}", err=True
    )
    if where == "above":
        typer.echo("  the traceback is printed above; please report it with the command that failed", err=True)
    else:
        typer.echo(
            f"  the traceback is in {where}; please report it with that file (--debug prints it instead)", err=True
        )
    raise typer.Exit(BUG_EXIT_CODE)


def write_crash_log(text: str) -> Path:
    """The traceback in a file of its own under the cache (the temporary directory where that is not writable)."""
    from vllm_repo.serve.server_files import cache_dir

    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    header = f"vllm-repo {_version()} on Python {sys.version.split()[0]}\nargv: {sys.argv!r}\n\n"
    for directory in (cache_dir() / "crash", Path(tempfile.gettempdir())):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f"vllm-repo-crash-{stamp}-", suffix=".log", dir=directory)
            with os.fdopen(fd, "w", encoding="utf-8") as log:
                log.write(header + text)
            return Path(name)
        except OSError:
            continue
    return Path("(nowhere: no writable directory)")


def _version() -> str:
    from vllm_repo import __version__

    return __version__
