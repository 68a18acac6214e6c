"""``pipecheck.stress.allocator``: the one freed block a stress trial's child starts with."""

from __future__ import annotations

import platform

from pipecheck.stress import allocator


def test_the_block_is_freed_on_glibc_and_skipped_elsewhere(monkeypatch):
    assert allocator.settle_allocator() == (platform.libc_ver()[0] == "glibc")
    assert allocator.WARM_BLOCK_BYTES < 32 << 20  # under glibc's ceiling for the threshold
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("musl", ""))
    assert allocator.settle_allocator() is False


def test_a_host_short_of_memory_skips_it_and_raises_nothing(monkeypatch):
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("glibc", "2.36"))

    def no_memory(_size):
        raise MemoryError

    monkeypatch.setattr(allocator, "bytearray", no_memory, raising=False)
    assert allocator.settle_allocator() is False
