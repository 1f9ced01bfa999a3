"""The console command `flashattn` (pyproject.toml [project.scripts]) and `python -m flashattn`:
the C++ command-line tool, built into the wheel as flashattn/bin/flashattn (tools/flashattn's
install rule for the "python" component), run with this process's arguments."""
from __future__ import annotations

import os
import subprocess
import sys


def binary() -> str:
    """The packaged executable's path."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "flashattn")


def main() -> None:
    exe = binary()
    if not os.access(exe, os.X_OK):
        sys.exit(f"flashattn: the command-line tool is missing from the package ({exe}): "
                 "reinstall it with `pip install .`")
    args = [exe, *sys.argv[1:]]
    if os.name == "posix":
        os.execv(exe, args)  # replaces this process: signals and the exit status are the tool's
    sys.exit(subprocess.call(args))
