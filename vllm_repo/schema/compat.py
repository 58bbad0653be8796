"""Library shims that let an older vLLM release import on top of newer libraries (the wheel route).

Used by :mod:`vllm_repo.schema.generate` when ``VLLM_REPO_SCHEMA_COMPAT=1`` (set by :mod:`vllm_repo.schema.wheel`). They
change what the libraries around vLLM do at import time, never vLLM's own code, and only in ways that can't reach
EngineArgs; the generated file lists the ones applied under "compat".
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterator, Sequence
from types import FrameType, ModuleType
from typing import Any

# Optional libraries some releases import at module level that the introspecting environment may lack; nothing of
# them reaches EngineArgs (vLLM 0.13-0.22 import gguf for the GGUF weight loader, 0.5 librosa, soundfile and outlines)
# or vllm serve's parser (0.11-0.14's OpenAI entrypoints import diskcache).
_STUBBED_IF_MISSING = ("gguf", "librosa", "soundfile", "outlines", "diskcache")


class _Anything:
    """Stands in for any attribute of a stubbed module: usable as a class, value, key, base class or decorator."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else _Anything()

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __mro_entries__(self, bases: tuple[object, ...]) -> tuple[type, ...]:
        return (object,)


class _StubModule(ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []  # a package, so "from gguf.constants import X" works too

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


def _imported_by_vllm() -> bool:
    """Whether the import under way comes from vLLM's own code. Libraries probe for optional packages
    (transformers' ``is_librosa_available``); those probes must keep seeing them missing."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        machinery = module.startswith(("importlib", "vllm_repo")) or frame.f_code.co_filename.startswith("<frozen")
        if not machinery:
            return module == "vllm" or module.startswith("vllm.")
        frame = frame.f_back
    return False


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of the named (missing) packages and their submodules get a :class:`_StubModule`."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.names and _imported_by_vllm():
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        pass


def apply_library_compat() -> list[str]:
    """Let an older vLLM import on top of newer libraries (the wheel route). Touches the libraries, never vLLM.

    - a module some releases import but never use for EngineArgs may be missing: it is stubbed
      (``_STUBBED_IF_MISSING``);
    - vLLM 0.9 registers configs (e.g. "aimv2") with transformers' AutoConfig that later transformers releases
      define themselves; registering an existing name then raises. Keep the existing registration instead.
    """
    applied: list[str] = []
    import importlib.util

    missing = tuple(name for name in _STUBBED_IF_MISSING if importlib.util.find_spec(name) is None)
    if missing:
        sys.meta_path.append(_StubFinder(missing))
        applied.extend(f"stub module {name}" for name in missing)
    with contextlib.suppress(ImportError):
        from transformers import AutoConfig

        original = AutoConfig.register

        def register(model_type: Any, config: Any, exist_ok: bool = False) -> Any:
            return original(model_type, config, exist_ok=True)

        AutoConfig.register = staticmethod(register)
        applied.append("transformers.AutoConfig.register(exist_ok=True)")
    return applied
