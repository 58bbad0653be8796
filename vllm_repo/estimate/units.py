"""Memory sizes as the sizing commands print them: in GiB where that says something, in MiB below, and two sizes
that are compared always printed so that they differ."""

from __future__ import annotations

GiB = 1 << 30
MiB = 1 << 20
_MOST_DECIMALS = 6


def size_text(size_bytes: float) -> str:
    """ "15.02 GiB", or "96.0 MiB" below a tenth of a GiB (where two decimals of GiB round to nothing)."""
    if abs(size_bytes) >= 0.1 * GiB:
        return f"{size_bytes / GiB:.2f} GiB"
    return f"{size_bytes / MiB:.1f} MiB"


def compared_sizes(larger: float, smaller: float) -> tuple[str, str]:
    """Two sizes, the first larger than the second, in the same unit and with as many decimals as it takes for the
    printed figures to differ (vLLM's own messages print GiB to two decimals: 0.00 of 0.00 says nothing)."""
    scale, unit = (GiB, "GiB") if min(abs(larger), abs(smaller)) >= 0.1 * GiB else (MiB, "MiB")
    for decimals in range(2, _MOST_DECIMALS + 1):
        first, second = f"{larger / scale:.{decimals}f}", f"{smaller / scale:.{decimals}f}"
        if first != second:
            break
    return f"{first} {unit}", f"{second} {unit}"
