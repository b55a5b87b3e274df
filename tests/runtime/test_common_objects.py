"""Connected components, detect_objects, flood_fill and draw_line (docs/runtime.md 3.1-3.4)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from arc_pipeline.runtime.common import (
    crop,
    detect_objects,
    draw_line,
    find_connected_components,
    flood_fill,
)

G4 = np.array([[0, 3, 0, 8], [3, 0, 0, 8], [0, 0, 5, 0], [8, 0, 0, 0]])


def cell_lists(objects, background=0):
    return [sorted((int(x), int(y)) for x, y in zip(*np.nonzero(o != background))) for o in objects]


# -- find_connected_components -------------------------------------------------------------------


def test_components_monochromatic_4():
    assert cell_lists(find_connected_components(G4)) == [[(0, 3), (1, 3)], [(3, 0)], [(0, 1)], [(1, 0)], [(2, 2)]]


def test_components_monochromatic_8():
    assert cell_lists(find_connected_components(G4, connectivity=8)) == [
        [(0, 3), (1, 3)],
        [(3, 0)],
        [(0, 1), (1, 0)],
        [(2, 2)],
    ]


def test_components_not_monochromatic_8():
    assert cell_lists(find_connected_components(G4, connectivity=8, monochromatic=False)) == [
        [(0, 1), (1, 0)],
        [(0, 3), (1, 3), (2, 2)],
        [(3, 0)],
    ]


def test_components_keep_values_and_background():
    g = np.full((3, 3), 5)
    g[0, 0] = g[0, 1] = 2
    g[2, 2] = 7
    objects = find_connected_components(g, background=5, monochromatic=False)
    assert len(objects) == 2
    assert objects[0].tolist() == [[2, 2, 5], [5, 5, 5], [5, 5, 5]]
    assert np.issubdtype(objects[0].dtype, np.integer)
    assert find_connected_components(np.full((3, 3), 5), background=5) == []


def test_components_invalid_connectivity():
    with pytest.raises(ValueError):
        find_connected_components(G4, connectivity=6)


def test_components_of_an_int8_grid_and_a_boolean_mask():
    objects = find_connected_components(G4.astype(np.int8))
    assert cell_lists(objects) == cell_lists(find_connected_components(G4))
    mask = G4 > 0
    assert len(find_connected_components(mask, background=False, connectivity=8, monochromatic=False)) == 3


def _reference_components(grid, connectivity, monochromatic):
    """Slow, obviously-correct labelling for the property test."""
    n, m = grid.shape
    steps = [(0, 1), (0, -1), (1, 0), (-1, 0)]
    if connectivity == 8:
        steps += [(1, 1), (1, -1), (-1, 1), (-1, -1)]
    colours = list(set(grid.flatten()) - {0}) if monochromatic else [None]
    result = []
    for colour in colours:
        member = (grid == colour) if monochromatic else (grid != 0)
        seen = np.zeros(grid.shape, dtype=bool)
        for x in range(n):
            for y in range(m):
                if member[x, y] and not seen[x, y]:
                    comp, todo = [], [(x, y)]
                    seen[x, y] = True
                    while todo:
                        px, py = todo.pop()
                        comp.append((px, py))
                        for dx, dy in steps:
                            qx, qy = px + dx, py + dy
                            if 0 <= qx < n and 0 <= qy < m and member[qx, qy] and not seen[qx, qy]:
                                seen[qx, qy] = True
                                todo.append((qx, qy))
                    result.append(sorted(comp))
    return result


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.int64, st.tuples(st.integers(1, 7), st.integers(1, 7)), elements=st.integers(0, 9)),
    st.sampled_from([4, 8]),
    st.booleans(),
)
def test_components_match_reference(grid, connectivity, monochromatic):
    got = cell_lists(find_connected_components(grid, connectivity=connectivity, monochromatic=monochromatic))
    assert got == _reference_components(grid, connectivity, monochromatic)


# -- detect_objects ------------------------------------------------------------------------------


def test_detect_objects_sorts_largest_box_first():
    objects = detect_objects(G4, connectivity=4, monochromatic=True)
    assert cell_lists(objects) == [[(0, 3), (1, 3)], [(3, 0)], [(0, 1)], [(1, 0)], [(2, 2)]]


def test_detect_objects_without_connectivity_is_empty():
    assert detect_objects(G4) == []
    assert detect_objects(G4, monochromatic=True, colors=[3]) == []


def test_detect_objects_default_not_monochromatic():
    g = np.zeros((4, 4), dtype=int)
    g[0, 0], g[0, 1], g[3, 3] = 1, 2, 4
    objects = detect_objects(g, connectivity=4)
    assert cell_lists(objects) == [[(0, 0), (0, 1)], [(3, 3)]]


def test_detect_objects_colors_and_predicate():
    g = np.zeros((5, 5), dtype=int)
    g[0, 0:3] = 2
    g[4, 4] = 3
    g[2, 2:4] = 2
    g[2, 4] = 3
    only_red = detect_objects(g, colors=[2], connectivity=4)
    assert cell_lists(only_red) == [[(0, 0), (0, 1), (0, 2)]]
    seen = []

    def wide(sprite):
        seen.append(sprite.shape)
        return sprite.shape[1] >= 3

    assert cell_lists(detect_objects(g, predicate=wide, connectivity=4)) == [
        [(0, 0), (0, 1), (0, 2)],
        [(2, 2), (2, 3), (2, 4)],
    ]
    assert (1, 3) in seen  # the predicate sees the cropped sprite


def test_detect_objects_windows():
    grid = np.zeros((5, 5), dtype=int)
    grid[1:3, 1:3] = 2
    objects = detect_objects(grid, allowed_dimensions=[(2, 2)])
    assert len(objects) == 1
    assert cell_lists(objects) == [[(1, 1), (1, 2), (2, 1), (2, 2)]]
    assert len(detect_objects(grid, allowed_dimensions=[(2, 2)], can_overlap=True)) == 9
    # components are full-canvas arrays, so the shape filter drops them
    both = detect_objects(grid, allowed_dimensions=[(2, 2)], connectivity=4, can_overlap=True)
    assert len(both) == 9
    # dimensions given as lists still drive the window scan; colors=[] rejects every window
    assert len(detect_objects(grid, allowed_dimensions=[[2, 2]], can_overlap=True)) == 9
    assert detect_objects(grid, allowed_dimensions=[(2, 2)], colors=[]) == []


def test_detect_objects_window_predicate_sees_raw_window():
    grid = np.zeros((4, 4), dtype=int)
    grid[0, 0] = 1
    shapes = []
    detect_objects(
        grid, allowed_dimensions=[(2, 3)], can_overlap=True, predicate=lambda w: shapes.append(w.shape) or True
    )
    assert set(shapes) == {(2, 3)}


def test_detect_objects_window_equal_to_grid_shape_keeps_component():
    grid = np.zeros((2, 2), dtype=int)
    grid[0, 0] = 3
    objects = detect_objects(grid, connectivity=4, allowed_dimensions=[(2, 2)], can_overlap=True)
    assert len(objects) == 1  # the window equals the surviving component


def test_detect_objects_overlap_resolution_prefers_coverage():
    grid = np.zeros((1, 5), dtype=int)
    grid[0, :] = [1, 1, 1, 1, 0]
    # windows of width 2 over a 4-long bar: two disjoint windows cover everything
    objects = detect_objects(grid, allowed_dimensions=[(1, 2)])
    assert cell_lists(objects) == [[(0, 0), (0, 1)], [(0, 2), (0, 3)]]


# -- flood_fill --------------------------------------------------------------------------------


def test_flood_fill_basic_and_returns_none():
    g = np.array([[1, 1, 0], [0, 1, 0], [1, 0, 1]])
    assert flood_fill(g, 0, 0, 5) is None
    assert g.tolist() == [[5, 5, 0], [0, 5, 0], [1, 0, 1]]
    g = np.array([[1, 1, 0], [0, 1, 0], [1, 0, 1]])
    flood_fill(g, 0, 0, 5, connectivity=8)
    assert g.tolist() == [[5, 5, 0], [0, 5, 0], [5, 0, 5]]


def test_flood_fill_errors_and_same_colour():
    g = np.zeros((3, 3), dtype=int)
    with pytest.raises(AssertionError):
        flood_fill(g, 0, 0, 1, connectivity=6)
    with pytest.raises(IndexError):
        flood_fill(g, 5, 0, 1, connectivity=6)
    flood_fill(g, 1, 1, 0)
    assert not g.any()


def test_flood_fill_large_region_and_float_grid():
    g = np.zeros((30, 30), dtype=int)
    flood_fill(g, 0, 0, 4)
    assert (g == 4).all()
    f = np.zeros((3, 3))
    f[1, :] = 42.0
    flood_fill(f, 0, 0, 1.5)
    assert f[0].tolist() == [1.5] * 3 and f[2].tolist() == [0.0] * 3


def test_flood_fill_negative_start_wraps():
    g = np.zeros((3, 3), dtype=int)
    g[1, :] = 1
    flood_fill(g, -1, 1, 7)
    # the start aliases (2, 1); of its neighbours only (0, 1) passes the bounds check
    assert g.tolist() == [[7, 7, 7], [1, 1, 1], [0, 7, 0]]


# -- draw_line ---------------------------------------------------------------------------------


def test_draw_line_to_end_point_off_axis():
    g = np.zeros((6, 6), dtype=int)
    assert draw_line(g, 0, 0, end_x=4, end_y=2, color=1) == (4, 4)
    assert {(int(x), int(y)) for x, y in zip(*np.nonzero(g))} == {(i, i) for i in range(5)}


def test_draw_line_enters_grid_from_outside():
    g = np.zeros((6, 6), dtype=int)
    assert draw_line(g, -3, 1, direction=(1, 0), color=2) == (5, 1)
    assert g[:, 1].tolist() == [2] * 6 and g.sum() == 12


def test_draw_line_stop_colors():
    g = np.zeros((6, 6), dtype=int)
    g[3, 0] = 5
    assert draw_line(g, 0, 0, direction=(1, 0), color=2, stop_at_color=[5]) == (2, 0)
    assert g[:, 0].tolist() == [2, 2, 2, 5, 0, 0]
    g = np.zeros((6, 6), dtype=int)
    g[3, 0] = 5
    assert draw_line(g, 3, 0, direction=(1, 0), color=2, stop_at_color=[5]) == (3, 0)
    assert g.sum() == 5


def test_draw_line_edge_cases():
    g = np.zeros((6, 6), dtype=int)
    assert draw_line(g, 2, 2, direction=(1, 0), length=0, color=1) == (2, 2) and not g.any()
    with pytest.raises(AssertionError):
        draw_line(g, 1.5, 0, direction=(1, 0), color=1)
    assert draw_line(g, 1.0, 0, direction=(1, 0), length=1, color=1) == (1, 0)
    with pytest.raises(TypeError):
        draw_line(g, 0, 0, color=1)
    with pytest.raises(TypeError):
        draw_line(g, 0, 0, end_x=3.0, end_y=0, color=1)
    with pytest.raises(IndexError):
        draw_line(g, 0, 0, direction=(0.5, 1), color=1)
    with pytest.raises(AssertionError):
        draw_line(g, 0, 0, end_x=3, color=1)
    g = np.zeros((6, 6), dtype=int)
    assert draw_line(g, 0, 4, direction=(2, -3), length=3, color=1) == (2, 2)
    assert {(int(x), int(y)) for x, y in zip(*np.nonzero(g))} == {(0, 4), (1, 3), (2, 2)}
    with pytest.raises(TypeError):
        draw_line(np.zeros((2, 2), dtype=int), 0, 0, direction=(1, 0))


def test_draw_line_returns_python_ints_and_skips_offgrid():
    g = np.zeros((3, 3), dtype=int)
    end = draw_line(g, 0, 0, direction=(1, 1), color=3)
    assert end == (2, 2) and all(type(v) is int for v in end)
    assert draw_line(g, 5, 5, direction=(1, 0), color=3) == (5, 5)


def test_crop_of_detected_object():
    g = np.zeros((5, 5), dtype=int)
    g[1:3, 2] = 4
    (obj,) = detect_objects(g, connectivity=4)
    assert crop(obj).tolist() == [[4], [4]]
