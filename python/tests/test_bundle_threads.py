"""Threads that name a kernel for the first time at once."""

import ctypes
import threading

from kvgen import bundle as bundle_module


def test_first_names_from_two_threads_share_one_live_buffer(monkeypatch):
    """Both threads miss the name, then both store a buffer: each must get
    the address of the buffer the bundle keeps. An overwritten buffer was
    freed while the args struct remembered for its launch still pointed at
    it, and later launches read freed memory."""
    b = bundle_module.Bundle.__new__(bundle_module.Bundle)
    b._names = {}
    both_missed = threading.Barrier(2)
    create = ctypes.create_string_buffer

    def create_after_both_missed(data):
        both_missed.wait(timeout=10)
        return create(data)

    monkeypatch.setattr(ctypes, "create_string_buffer",
                        create_after_both_missed)
    addresses = [None, None]

    def name(i):
        addresses[i] = b._name("kv_append")

    threads = [threading.Thread(target=name, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.setattr(ctypes, "create_string_buffer", create)
    kept = b._names["kv_append"]
    assert addresses == [kept[1], kept[1]]
    assert ctypes.string_at(kept[1]) == b"kv_append"
