"""guardrail.pygc.settle: what the guard's servers do to Python's collector once their sessions are built."""

from __future__ import annotations

import gc
import weakref

from guardrail import pygc


def test_settle_freezes_what_exists_and_collects_less_often():
    before = gc.get_threshold()
    try:
        class Node:
            pass

        node = Node()
        node.self = node  # a cycle, unreachable once the name is dropped: collected first, never frozen
        gone = weakref.ref(node)
        del node
        pygc.settle()
        assert gone() is None
        assert gc.get_freeze_count() > 1000  # the modules, classes and functions loaded so far
        assert gc.get_threshold() == pygc.THRESHOLDS
        assert gc.get_count()[0] < 100  # the collection before the freeze left the young generation empty
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
