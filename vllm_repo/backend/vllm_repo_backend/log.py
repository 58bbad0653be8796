"""What the backend tells whoever runs the server: log lines through Triton's logger (Python's logging outside the
stub), and thread names the OS shows."""

from __future__ import annotations

import logging

from . import stub

_fallback_logger = logging.getLogger("vllm_backend")


def info(message: str) -> None:
    if stub.pb_utils is not None:
        stub.pb_utils.Logger.log_info(message)
    else:
        _fallback_logger.info(message)


def warn(message: str) -> None:
    if stub.pb_utils is not None:
        stub.pb_utils.Logger.log_warn(message)
    else:
        _fallback_logger.warning(message)


def error(message: str) -> None:
    if stub.pb_utils is not None:
        stub.pb_utils.Logger.log_error(message)
    else:
        _fallback_logger.error(message)


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` in the OS too (top -H, py-spy, /proc/PID/task/*/comm), where Linux allows."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME: at most 15 bytes and a NUL
    except (OSError, AttributeError):
        pass
