"""Threads that name a kernel for the first time at once."""

import threading

from kvgen import bundle as bundle_module


def test_first_names_from_two_threads_agree(monkeypatch):
    """Both threads miss the name, then both store it: each gets the name as
    kvrt takes it (bytes, an immutable object; the extension's call tables
    hold their own reference, so a replaced entry frees nothing a launch
    reads)."""
    b = bundle_module.Bundle.__new__(bundle_module.Bundle)
    b._names = {}
    both_missed = threading.Barrier(2)
    real = bundle_module._kernel_name

    def name_after_both_missed(kernel):
        both_missed.wait(timeout=10)
        return real(kernel)

    monkeypatch.setattr(bundle_module, "_kernel_name", name_after_both_missed)
    names = [None, None]

    def name(i):
        names[i] = b._name("kv_append")

    threads = [threading.Thread(target=name, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert names == [b"kv_append", b"kv_append"]
    assert b._names["kv_append"] == b"kv_append"
