"""Restoring the shared `Color` class after a program changed it."""

from arc_pipeline.runtime.common import Color
from arc_pipeline.runtime.state import restore_color, snapshot_color


def test_restore_undoes_reassignment_list_mutation_and_new_names():
    snapshot = snapshot_color()
    original_not_black = list(Color.NOT_BLACK)
    try:
        Color.RED = 7
        Color.NOT_BLACK.remove(3)
        Color.ALL_COLORS = [1]
        Color.CYAN = 11
    finally:
        restore_color(snapshot)
    assert Color.RED == 2
    assert Color.NOT_BLACK == original_not_black
    assert Color.ALL_COLORS == list(range(10))
    assert not hasattr(Color, "CYAN")
    # the snapshot itself stays intact for the next restore
    Color.NOT_BLACK.append(99)
    restore_color(snapshot)
    assert Color.NOT_BLACK == original_not_black
