"""GPUs people serve on, with the memory vLLM sees.

vLLM budgets from the total that the CUDA/ROCm runtime reports (``torch.cuda.mem_get_info``), which is a few hundred
MiB below the board size that nvidia-smi prints. Where that runtime total was read off a real vLLM log it is used as
is (``measured``); otherwise it is nvidia-smi's total less the typical gap seen on the measured boards, and the
estimate says the GPU figure is approximate.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from vllm_repo.errors import UsageError

GiB = 1 << 30
MiB = 1 << 20

# nvidia-smi total minus runtime total on the measured boards (H100 469 MiB, H200 616, L40S 582, T4 451, 3090 430).
_TYPICAL_RUNTIME_GAP_MIB = 510


@dataclass(frozen=True)
class Gpu:
    name: str
    board_mib: int | None
    """nvidia-smi's memory.total (MiB); None for a custom size."""
    runtime_gib: float | None = None
    """Total as the CUDA runtime reports it, read off a real vLLM log; None where not measured."""
    source: str = ""
    aliases: tuple[str, ...] = field(default_factory=tuple)
    compute_capability: tuple[int, int] | None = None

    @property
    def measured(self) -> bool:
        return self.runtime_gib is not None

    @property
    def total_bytes(self) -> int:
        if self.runtime_gib is not None:
            return int(self.runtime_gib * GiB)
        assert self.board_mib is not None
        return (self.board_mib - _TYPICAL_RUNTIME_GAP_MIB) * MiB

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GiB

    @property
    def is_a100(self) -> bool:
        # vLLM keeps the small batch defaults on A100s whatever their memory (PR 17885).
        return "a100" in self.name.lower()


CATALOG: tuple[Gpu, ...] = (
    Gpu("B200", 183359, 178.36, "vLLM log 'Free memory on device (177.66/178.36 GiB)'", ("b200 180gb",), (10, 0)),
    Gpu(
        "H200",
        143771,
        139.8,
        "vLLM 0.26.0 on an H200: 'Free memory on device (139.29/139.8 GiB)'",
        ("h200 141gb", "h200 sxm", "h200 nvl", "gh200 144gb"),
        (9, 0),
    ),
    Gpu("H100 NVL", 95830, None, "nvidia-smi 95830 MiB", ("h100 94gb", "h100 nvl 94gb"), (9, 0)),
    Gpu(
        "H100 80GB",
        81559,
        79.19,
        "vLLM logs: 'Free memory on device (78.66/79.19 GiB)'",
        ("h100", "h100 sxm", "h100 pcie", "h100 80gb hbm3", "h800"),
        (9, 0),
    ),
    Gpu("H20", 97871, None, "nvidia-smi 97871 MiB", ("h20 96gb",), (9, 0)),
    Gpu(
        "A100 80GB",
        81920,
        79.15,
        "PyTorch: '79.15 GiB total capacity'",
        ("a100", "a100 sxm4 80gb", "a100 pcie 80gb", "a800", "a800 80gb"),
        (8, 0),
    ),
    Gpu("A100 40GB", 40960, 39.39, "PyTorch: '39.39 GiB total capacity'", ("a100 sxm4 40gb", "a100 pcie 40gb"), (8, 0)),
    Gpu("L40S", 46068, 44.42, "vLLM logs: 'Free memory on device (43.93/44.42 GiB)'", ("l40s 48gb",), (8, 9)),
    Gpu("L40", 46068, None, "nvidia-smi 46068 MiB", (), (8, 9)),
    Gpu("A40", 46068, 44.35, "PyTorch: '44.35 GiB total capacity'", (), (8, 6)),
    Gpu("RTX 6000 Ada", 49140, None, "nvidia-smi 49140 MiB", ("rtx 6000 ada generation", "6000 ada"), (8, 9)),
    Gpu("RTX A6000", 49140, 47.54, "PyTorch: '47.54 GiB total capacity'", ("a6000",), (8, 6)),
    Gpu("L4", 23034, None, "nvidia-smi 23034 MiB", ("l4 24gb",), (8, 9)),
    Gpu("A10G", 23028, None, "nvidia-smi 23028 MiB", ("a10g 24gb",), (8, 6)),
    Gpu("A10", 23028, None, "nvidia-smi 23028 MiB", ("a10 24gb",), (8, 6)),
    Gpu("RTX 5090", 32607, None, "nvidia-smi 32607 MiB", ("geforce rtx 5090", "5090"), (12, 0)),
    Gpu("RTX 4090", 24564, 23.55, "vLLM log on 2x RTX 4090", ("geforce rtx 4090", "4090"), (8, 9)),
    Gpu("RTX 3090", 24576, 23.58, "vLLM log 'total_gpu_memory (23.58GiB)'", ("geforce rtx 3090", "3090"), (8, 6)),
    Gpu("RTX 4080", 16376, None, "nvidia-smi 16376 MiB", ("geforce rtx 4080", "4080"), (8, 9)),
    Gpu("T4", 15360, 14.56, "vLLM log on a Colab T4", ("tesla t4",), (7, 5)),
    Gpu("V100 32GB", 32768, 31.74, "PyTorch: '31.74 GiB total capacity'", ("tesla v100 32gb",), (7, 0)),
    Gpu("V100 16GB", 16384, 15.77, "PyTorch: '15.77 GiB total capacity'", ("v100", "tesla v100"), (7, 0)),
    Gpu("MI300X", 196592, None, "rocm-smi 192 GB HBM3", ("instinct mi300x", "mi300"), None),
    Gpu("MI325X", 262144, None, "rocm-smi 256 GB HBM3E", ("instinct mi325x",), None),
)


class UnknownGpuError(UsageError):
    """A GPU name the catalog does not know, or a size that is not one."""


def _key(text: str) -> str:
    text = text.lower().replace("nvidia", "").replace("amd", "").replace("geforce", "")
    text = re.sub(r"(\d+)\s*gi?b\b", r"\1gb", text)
    return re.sub(r"[^a-z0-9]", "", text)


def _index() -> dict[str, Gpu]:
    table: dict[str, Gpu] = {}
    for gpu in CATALOG:
        for name in (gpu.name, *gpu.aliases):
            table.setdefault(_key(name), gpu)
    return table


def find_gpu(name: str) -> Gpu:
    """The catalog entry for a GPU name as people write it ('H100', 'nvidia h100 80gb', 'A100-40GB')."""
    table = _index()
    key = _key(name)
    if key in table:
        return table[key]
    close = difflib.get_close_matches(key, list(table), n=3, cutoff=0.6)
    names = sorted({table[k].name for k in close})
    hint = f" Did you mean {', '.join(repr(n) for n in names)}?" if names else ""
    raise UnknownGpuError(
        f"unknown GPU '{name}'.{hint} Known GPUs: {', '.join(g.name for g in CATALOG)}; "
        "or give the memory with --gpu-memory-gib"
    )


def custom_gpu(total_gib: float) -> Gpu:
    if not total_gib > 0:
        raise UnknownGpuError(f"GPU memory must be positive, got {total_gib} GiB")
    return Gpu(f"{total_gib:g} GiB GPU", None, float(total_gib), "given by the user")


def resolve_gpu(gpu: str | float | int | Gpu) -> Gpu:
    """A catalog name, a size in GiB (as a number or a numeric string), or a Gpu."""
    if isinstance(gpu, Gpu):
        return gpu
    if isinstance(gpu, (int, float)) and not isinstance(gpu, bool):
        return custom_gpu(float(gpu))
    text = str(gpu).strip()
    try:
        size = float(text.lower().removesuffix("gib").strip())
    except ValueError:
        return find_gpu(text)
    return custom_gpu(size)
