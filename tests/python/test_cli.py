"""The command-line tool installed with the package: the console script `flashattn` and
`python -m flashattn` exec the binary inside the package (flashattn/bin/flashattn), passing the
arguments and the exit status through."""
import ctypes
import importlib.metadata
import os
import subprocess
import sys
import sysconfig

import pytest

import flashattn


def console_script() -> str:
    entry = [e for e in importlib.metadata.entry_points(group="console_scripts")
             if e.name == "flashattn"]
    assert [e.value for e in entry] == ["flashattn._cli:main"], entry
    path = os.path.join(sysconfig.get_path("scripts"), "flashattn")
    assert os.access(path, os.X_OK), f"{path}: the console script is not installed"
    return path


def has_nvidia_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


COMMANDS = {"script": lambda: [console_script()],
            "module": lambda: [sys.executable, "-m", "flashattn"]}


@pytest.mark.parametrize("how", list(COMMANDS))
def test_help(how):
    r = subprocess.run(COMMANDS[how]() + ["--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"flashattn {flashattn.__version__}: ") and "Commands:" in r.stdout


@pytest.mark.parametrize("how", list(COMMANDS))
def test_info(how):
    r = subprocess.run(COMMANDS[how]() + ["info"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"flashattn {flashattn.__version__}\n" in r.stdout
    for b in flashattn.list_backends():
        assert f"  {b.name} " in r.stdout
    if not has_nvidia_driver():
        assert "CUDA devices: none; no NVIDIA driver or CUDA device found" in r.stdout, r.stdout


@pytest.mark.parametrize("how", list(COMMANDS))
def test_exit_status_passes_through(how):
    r = subprocess.run(COMMANDS[how]() + ["no-such-command"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert 'unknown command "no-such-command"' in r.stderr and "Traceback" not in r.stderr


def test_cli_runs_the_packaged_binary():
    from flashattn import _cli
    package_dir = os.path.dirname(flashattn.__file__)
    assert os.path.dirname(_cli.binary()) == os.path.join(package_dir, "bin")
