"""The command-line tool installed with the package: the console script `flashattn` and
`python -m flashattn` exec the binary inside the package (flashattn/bin/flashattn), passing the
arguments and the exit status through."""
import ctypes
import importlib.metadata
import os
import subprocess
import sys

import pytest

import flashattn


def console_script() -> str:
    """The script pip wrote for [project.scripts], found through the installed files (RECORD),
    so that any install scheme (a venv, /usr/local/bin, --user) is right."""
    dist = importlib.metadata.distribution("flashattn")
    entry = [e.value for e in dist.entry_points
             if e.group == "console_scripts" and e.name == "flashattn"]
    assert entry == ["flashattn._cli:main"], entry
    scripts = [str(dist.locate_file(f)) for f in dist.files or []
               if f.name == "flashattn" and f.parts[0] != "flashattn"]  # not flashattn/bin/...
    assert len(scripts) == 1, scripts
    assert os.access(scripts[0], os.X_OK), f"{scripts[0]}: not executable"
    return scripts[0]


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
