"""The C allocator's state in a stress trial's process, made like a training process's.

glibc's ``malloc`` serves blocks above its mmap threshold (128 KiB at start) with a fresh
``mmap`` each, faulted in page by page, and trims the heap's top above twice that. Freeing an
mmapped block raises the threshold to that block's size, up to 32 MiB on 64-bit
(``DEFAULT_MMAP_THRESHOLD_MAX``; glibc's "dynamic mmap threshold", ``mallopt(3)``). A training
process has freed such blocks long before its loader runs (its model's initialization, its first
batches), and its DataLoader workers fork with that state; a stress trial starts in a fresh
interpreter and would measure every large tensor of the pipeline paying page faults the real
run does not. ``python benchmarks/allocator_state.py --pipelines torchops,jpeg,text,fft``
measured the calibration suite's torch-op transform at 7.51 and 7.77 ms an item in a fresh
interpreter and 3.22 and 3.49 ms after one 31 MiB block was freed (docs/model.md#allocator-state).

Within pipecheck only a stress trial's own child process calls it (:mod:`pipecheck.stress.trial`);
a stress run inside the user's process, and ``wrap``, leave the user's allocator as it is.
"""

from __future__ import annotations

import platform

WARM_BLOCK_BYTES = 31 << 20
"""Bytes of the block allocated and freed once: under glibc's 32 MiB ceiling for the dynamic
threshold (a larger block is freed without raising it), so the threshold ends at 31 MiB and the
trim threshold at 62 MiB, as after a training process frees its first large tensor."""


def settle_allocator() -> bool:
    """Allocate and free one :data:`WARM_BLOCK_BYTES` block where the C library is glibc, so
    the process's allocator is in a long-running training process's state; ``True`` when done,
    ``False`` elsewhere (other allocators have no such threshold to raise) and where the block
    cannot be had (``MemoryError``). Raises nothing."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        block = bytearray(WARM_BLOCK_BYTES)
    except MemoryError:  # a host this short of memory measures as it is; the trial goes on
        return False
    del block
    return True
