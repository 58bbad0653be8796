"""`export kubernetes`'s options default to what the library does when they are left out: each CLI default is the
default of plan_kubernetes's parameter (export_kubernetes takes the same) or OperatorOptions's field it is passed to,
so the command and a Python caller export the same manifests."""

from __future__ import annotations

import dataclasses
import inspect

from vllm_repo.cli.export import kubernetes
from vllm_repo.export import plan_kubernetes
from vllm_repo.export.operator import OperatorOptions

# The CLI's name -> the library's, where they differ.
RENAMED = {
    "read_bandwidth": "read_mb_s",
    "grace_period": "grace_period_s",
    "volume": "volumes",
    "toleration": "tolerations",
}
# What only the command does with the result: print or write it, refuse on findings.
CLI_ONLY = {"strict": False, "output": None, "force": False}
# Repeatable options are None when not given (typer), an empty tuple in OperatorOptions.
REPEATABLE = {"volumes", "node_selector", "tolerations"}


def library_defaults() -> dict[str, object]:
    exported = {
        name: p.default
        for name, p in inspect.signature(plan_kubernetes).parameters.items()
        if p.default is not inspect.Parameter.empty and name != "operator"
    }
    operator = {f.name: getattr(OperatorOptions(), f.name) for f in dataclasses.fields(OperatorOptions)}
    assert not exported.keys() & operator.keys()
    return {**exported, **operator}


def test_every_option_defaults_to_the_library_default():
    library = library_defaults()
    options = {name: p.default for name, p in inspect.signature(kubernetes).parameters.items() if name != "repository"}
    compared = set()
    for option, default in options.items():
        if option in CLI_ONLY:
            assert default == CLI_ONLY[option], option
            continue
        name = RENAMED.get(option, option)
        assert name in library, f"--{option.replace('_', '-')} is passed to nothing the library defaults"
        expected = library[name]
        if name in REPEATABLE:
            assert default is None and expected == (), option
        else:
            assert default == expected, f"--{option.replace('_', '-')}: {default!r} here, {expected!r} in the library"
        compared.add(name)
    assert compared == set(library), f"library parameters no option sets: {sorted(set(library) - compared)}"
