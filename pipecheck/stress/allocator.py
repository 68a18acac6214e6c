"""The C allocator's state in a stress trial's process, made like a training process's.

glibc's ``malloc`` serves blocks above its mmap threshold (128 KiB at start) with a fresh
``mmap`` each, faulted in page by page, and trims the heap's top above twice that. Freeing an
mmapped block raises the threshold to that block's size, up to 32 MiB on 64-bit
(``DEFAULT_MMAP_THRESHOLD_MAX``; glibc's "dynamic mmap threshold", ``mallopt(3)``). A training
process has freed such blocks long before its loader runs (its model's initialization, its first
batches), and its DataLoader workers fork with that state; a stress trial starts in a fresh
interpreter and would measure every large tensor of the pipeline paying page faults the real
run does not. ``python benchmarks/allocator_state.py`` measured the calibration suite's
torch-op transform at 0.18-0.25 s a batch after one 31 MiB block was freed and 0.33-0.49 s
without (docs/model.md#allocator-state).
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
    ``False`` elsewhere (other allocators have no such threshold to raise)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    block = bytearray(WARM_BLOCK_BYTES)
    del block
    return True
