"""Markers (declared in pyproject.toml) turned into skips with a reason, never a pass:
  torch  needs PyTorch (not installed in CI: it is too big; these run on the GPU machine)
  gpu    needs a CUDA device (and torch, which allocates the CUDA memory)

OpenBLAS runs single-threaded here unless OPENBLAS_NUM_THREADS says otherwise: the references'
matmuls are small batched GEMMs, and on the shared 2-core CI machine a (12, 113, 64) x (12, 64,
203) float64 matmul took 0.28 s with OpenBLAS's 2 threads against 0.002 s with 1 (the threads
spin against the other jobs). It must be set before NumPy is first imported.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


def _gpu_skip_reason():
    if torch is None:
        return "torch is not installed (the GPU tests allocate CUDA memory with it)"
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None


def pytest_collection_modifyitems(config, items):
    no_torch = pytest.mark.skip(reason="torch is not installed")
    gpu_reason = _gpu_skip_reason()
    no_gpu = pytest.mark.skip(reason=gpu_reason) if gpu_reason else None
    for item in items:
        if "gpu" in item.keywords and no_gpu is not None:
            item.add_marker(no_gpu)
        elif "torch" in item.keywords and torch is None:
            item.add_marker(no_torch)
