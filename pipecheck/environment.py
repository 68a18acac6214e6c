"""Describe the host a run happened on (CPUs, memory, Python, torch, CUDA)."""

from __future__ import annotations

import os
import platform
from typing import Any, Optional

import psutil

from pipecheck._version import __version__
from pipecheck.records import Environment


def collect_environment() -> Environment:
    """Return the :class:`~pipecheck.records.Environment` of this process.

    ``cpu_count`` is ``os.cpu_count()`` (1 if the OS cannot tell); ``usable_cpus`` the CPUs this
    process may run on (``os.sched_getaffinity``, else ``cpu_count``). ``torch`` is ``None`` when
    torch is not importable, and then ``cuda`` is ``False``. ``cuda_device`` is a GPU name, or
    ``None`` when it cannot be known without creating a CUDA context (see
    :func:`_cuda_device_name`). ``intra_op_threads`` is ``torch.get_num_threads()``. Never
    raises for a missing optional component.
    """
    cpu_count = os.cpu_count() or 1
    torch = _import_torch()
    cuda = _cuda_available(torch)
    return Environment(
        cpu_count=cpu_count,
        usable_cpus=_usable_cpus(cpu_count),
        python=platform.python_version(),
        torch=None if torch is None else str(torch.__version__),
        platform=platform.platform(),
        cuda=cuda,
        cuda_device=_cuda_device_name(torch) if cuda else None,
        total_memory_bytes=int(psutil.virtual_memory().total),
        pipecheck=_pipecheck_version(),
        intra_op_threads=_intra_op_threads(torch),
    )


def _intra_op_threads(torch: Optional[Any]) -> Optional[int]:
    if torch is None:
        return None
    try:
        return int(torch.get_num_threads())
    except Exception:  # a torch build without it: not measured
        return None


def _usable_cpus(cpu_count: int) -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on macOS / Windows
        return cpu_count


def _import_torch() -> Optional[Any]:
    try:
        import torch  # lazily: importing torch takes seconds and is optional here
    except ImportError:
        return None
    return torch


def _cuda_available(torch: Optional[Any]) -> bool:
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver install: report no CUDA rather than fail the run
        return False


def _cuda_device_name(torch: Any) -> Optional[str]:
    """Name of the GPU, without creating a CUDA context ourselves.

    If the program already initialized CUDA, torch names the current device. Otherwise NVML
    (``pynvml``, when installed) is asked, and a name is returned only when every GPU it sees
    has the same name, so CUDA's and NVML's different device orders cannot mislabel it.
    """
    try:
        if torch.cuda.is_initialized():
            return str(torch.cuda.get_device_name(torch.cuda.current_device()))
    except Exception:
        return None
    return _nvml_common_device_name()


def _nvml_common_device_name() -> Optional[str]:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        names = {
            _as_text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index)))
            for index in range(pynvml.nvmlDeviceGetCount())
        }
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return names.pop() if len(names) == 1 else None


def _as_text(name: Any) -> str:
    return name.decode() if isinstance(name, bytes) else str(name)  # old pynvml returns bytes


def _pipecheck_version() -> Optional[str]:
    """This package's own version (``pipecheck/_version.py``, which the distribution
    ``torch-pipecheck`` takes its version from). Never the installed metadata of a distribution
    named ``pipecheck``: on PyPI that is another project, which may be installed beside this one."""
    return __version__


def torch_has_in_order() -> bool:
    """Whether this torch's ``DataLoader`` takes ``in_order`` (added in torch 2.6)."""
    import inspect

    from torch.utils.data import DataLoader

    return "in_order" in inspect.signature(DataLoader).parameters
