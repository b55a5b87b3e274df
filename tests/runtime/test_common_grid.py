"""Boxes, positions, colours, blitting, translation, scaling, collision, ... (docs/runtime.md 3.5-3.22)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from arc_pipeline.runtime.common import (
    blit,
    blit_object,
    blit_sprite,
    bounding_box,
    bounding_box_mask,
    check_between_objects,
    collision,
    contact,
    crop,
    is_contiguous,
    object_boundary,
    object_colors,
    object_interior,
    object_neighbors,
    object_position,
    scale_pattern,
    scale_sprite,
    translate,
)

grids = st.tuples(st.integers(1, 8), st.integers(1, 8)).flatmap(
    lambda shape: arrays(np.int64, shape, elements=st.integers(0, 3))
)


def cells(mask) -> set:
    return {(int(x), int(y)) for x, y in zip(*np.nonzero(mask))}


# -- bounding boxes and positions ---------------------------------------------------------------


def test_empty_grid_box_crop_mask_position():
    g = np.zeros((5, 7), dtype=int)
    assert bounding_box(g) == (5, 7, -5, -7)
    assert crop(g).shape == (0, 0)
    assert not bounding_box_mask(g).any()
    assert object_position(g) == (5, 7)
    assert object_position(g, anchor="center") == (2, 3)


def test_box_and_anchors():
    g = np.zeros((5, 7), dtype=int)
    g[1, 2] = g[3, 5] = 3
    box = bounding_box(g)
    assert box == (1, 2, 3, 4) and all(type(v) is int for v in box)
    assert object_position(g, anchor="center") == (2, 3.5)
    assert object_position(g, anchor="Top Right") == (3, 2)
    assert object_position(g, anchor="bottom left") == (1, 5)
    assert object_position(g, anchor="TOPLEFT") == (1, 2)
    assert object_position(g, anchor="bottom right") == (3, 5)
    assert object_position(g, anchor="left center") == (1, 3.5)
    assert object_position(g, anchor="rightcenter") == (3, 3.5)
    assert object_position(g, anchor="lower center") == (2, 5)
    for bad in ("top-left", "upper_left", "middle", "centre", "center left"):
        with pytest.raises(AssertionError):
            object_position(g, anchor=bad)


def test_position_types():
    ones = np.ones((3, 4), dtype=int)
    assert object_position(ones, anchor="Center") == (1, 1.5)
    x, y = object_position(ones, anchor="Center")
    assert type(x) is int and type(y) is float
    assert object_position(ones, anchor="top center") == (1, 0)


def test_bounding_box_on_boolean_mask_and_other_background():
    mask = np.zeros((4, 4), dtype=bool)
    mask[2, 1] = True
    assert bounding_box(mask) == (2, 1, 1, 1)
    g = np.full((4, 4), 7)
    g[1:3, 2] = 1
    assert bounding_box(g, background=7) == (1, 2, 2, 1)


def test_crop_is_a_view_keeping_inner_background():
    g = np.zeros((5, 5), dtype=int)
    g[1, 1] = g[3, 2] = 4
    c = crop(g)
    assert c.tolist() == [[4, 0], [0, 0], [0, 4]]
    c[1, 1] = 9
    assert g[2, 2] == 9


@settings(max_examples=60, deadline=None)
@given(grids)
def test_crop_matches_bounding_box_and_mask(g):
    _x, _y, w, h = bounding_box(g)
    c = crop(g)
    mask = bounding_box_mask(g)
    if not g.any():
        assert c.shape == (0, 0) and not mask.any()
        return
    assert c.shape == (w, h)
    assert np.array_equal(c, g[mask].reshape(w, h))
    assert c[0, :].any() and c[-1, :].any() and c[:, 0].any() and c[:, -1].any()
    assert (g[~mask] == 0).all()
    assert np.count_nonzero(c) == np.count_nonzero(g)


# -- colours -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([9, 1, 0], [9, 1]),
        ([1, 9, 0], [1, 9]),
        ([8, 3, 5, 0], [8, 3, 5]),
        ([2, 7, 4, 1, 0], [1, 2, 4, 7]),
        ([9, 8, 7, 6, 5, 4, 3, 2, 1, 0], [1, 2, 3, 4, 5, 6, 7, 8, 9]),
    ],
)
def test_object_colors_set_order(values, expected):
    colours = object_colors(np.array([values]))
    assert colours == expected
    assert all(isinstance(c, np.generic) for c in colours)


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint8])
@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.integers(0, 9), min_size=1, max_size=40))
def test_object_colors_equals_python_set_expression(dtype, values):
    g = np.array([values], dtype=dtype)
    assert object_colors(g) == list(set(g.flatten()) - {0})
    assert object_colors(g, background=3) == list(set(g.flatten()) - {3})


def test_object_colors_empty():
    assert object_colors(np.zeros((3, 3), dtype=int)) == []


# -- blit and friends --------------------------------------------------------------------------

S = np.array([[5, 0], [0, 5]])


def test_blit_clips_and_truncates():
    g = np.zeros((3, 3), dtype=int)
    assert blit(g, S, 2, 2) is g
    assert cells(g) == {(2, 2)}
    g = np.zeros((3, 3), dtype=int)
    blit(g, S, -1, 0)
    assert cells(g) == {(0, 1)}
    g = np.zeros((3, 3), dtype=int)
    blit(g, S, 1.7, -0.5)
    assert cells(g) == {(1, 0), (2, 1)}


def test_blit_default_is_opaque_blit_sprite_transparent():
    assert blit(np.ones((3, 3), dtype=int), S).tolist() == [[5, 0, 1], [0, 5, 1], [1, 1, 1]]
    assert blit_sprite(np.ones((3, 3), dtype=int), S, 0, 0).tolist() == [[5, 1, 1], [1, 5, 1], [1, 1, 1]]
    g = np.ones((3, 3), dtype=int)
    assert blit_sprite(g, S, x=1, y=1, background=5) is g
    assert g.tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 1]]


def test_blit_object_paints_in_place_and_clips():
    g = np.full((2, 2), 3)
    obj = np.zeros((3, 3), dtype=int)
    obj[1, 1] = obj[2, 2] = 6
    assert blit_object(g, obj) is g
    assert g.tolist() == [[3, 3], [3, 6]]


def test_blit_with_aliased_sprite_reads_cell_by_cell():
    g = np.array([[1, 2, 3]])
    blit(g, g, 0, 1)  # each write is visible to the following reads
    assert g.tolist() == [[1, 1, 1]]


def test_translate_vector():
    g4 = np.array([[0, 3, 0, 8], [3, 0, 0, 8], [0, 0, 5, 0], [8, 0, 0, 0]])
    out = translate(g4, 1, -1)
    assert out.tolist() == [[0, 0, 0, 0], [3, 0, 8, 0], [0, 0, 8, 0], [0, 5, 0, 0]]
    assert g4[0, 1] == 3  # input untouched


def test_translate_background_dtype_and_float_shift():
    g = np.array([[1, 2], [3, 4]], dtype=np.int8)
    out = translate(g, np.int64(1), 0, background=9)
    assert out.dtype == np.int8 and out.tolist() == [[9, 9], [1, 2]]
    with pytest.raises(IndexError):
        translate(g, 1.0, 0)


@settings(max_examples=60, deadline=None)
@given(grids, st.integers(-4, 4), st.integers(-4, 4))
def test_translate_inverse_keeps_surviving_pixels(g, dx, dy):
    back = translate(translate(g, dx, dy), -dx, -dy)
    n, m = g.shape
    xs, ys = np.indices(g.shape)
    keep = (xs + dx >= 0) & (xs + dx < n) & (ys + dy >= 0) & (ys + dy < m)
    assert np.array_equal(back[keep], g[keep])
    assert (back[~keep] == 0).all()


def test_scale_sprite_and_pattern(capsys):
    assert scale_sprite([[1, 2]], 2).tolist() == [[1, 1, 2, 2], [1, 1, 2, 2]]
    assert scale_sprite(np.array([[1, 2]]), 0).shape == (0, 0)
    with pytest.raises(TypeError):
        scale_sprite(np.array([[1]]), 1.5)
    assert scale_pattern(np.array([[3]]), 3).tolist() == [[3] * 3] * 3
    assert capsys.readouterr().out == "scale_pattern: DEPRECATED, switch to scale_sprite\n"


# -- collision / contact / between ---------------------------------------------------------------


def test_collision_and_contact_vectors():
    a = np.zeros((3, 3), dtype=int)
    a[0, 0] = 1
    b = np.zeros((2, 2), dtype=int)
    b[0, 0] = 1
    assert collision(object1=a, object2=b) is True
    assert collision(object1=a, object2=b, x2=1) is False
    assert contact(object1=a, object2=b, x2=1) is True
    assert contact(object1=a, object2=b, x2=1, y2=1) is False
    assert contact(object1=a, object2=b, x2=1, y2=1, connectivity=8) is True
    with pytest.raises(AttributeError):
        collision(a, b)
    with pytest.raises(ValueError):
        contact(object1=a, object2=b, connectivity=6)
    with pytest.raises(AttributeError):
        contact(object1=a, connectivity=6)


def test_collision_offsets_truncate_and_far_objects():
    a = np.ones((2, 2), dtype=int)
    assert collision(object1=a, object2=a, x1=5, y1=5, x2=6.9, y2=6.9) is True
    assert collision(object1=a, object2=a, x2=-2) is False
    assert contact(object1=a, object2=a, x2=-2) is True
    assert contact(object1=a, object2=a, x2=-3) is False


def test_check_between_objects_vectors():
    o1 = np.zeros((7, 7), dtype=int)
    o1[0:2, 2:5] = 1
    o2 = np.zeros((7, 7), dtype=int)
    o2[5:7, 1:6] = 1
    hits = {(x, y) for x in range(7) for y in range(7) if check_between_objects(o1, o2, x, y)}
    assert hits == {(x, y) for x in range(2, 5) for y in range(2, 5)}
    hits = {(x, y) for x in range(7) for y in range(7) if check_between_objects(o2, o1, x, y, padding=1)}
    assert hits == {(x, 3) for x in range(2, 5)}
    assert check_between_objects(o1, o2, 3, 3) is True


# -- interior / boundary / neighbours ------------------------------------------------------------


def ring_grid():
    g = np.zeros((7, 7), dtype=int)
    g[1:6, 1:6] = 3
    g[2:5, 2:5] = 0
    return g


def test_interior_boundary_neighbors_of_ring():
    g = ring_grid()
    interior = object_interior(g)
    assert interior.dtype == bool
    assert cells(interior) == {(x, y) for x in range(1, 6) for y in range(1, 6)}
    assert cells(object_boundary(g)) == cells(g == 3)
    hole = {(x, y) for x in range(2, 5) for y in range(2, 5)} - {(3, 3)}
    frame = {(x, y) for x in range(7) for y in range(7) if x in (0, 6) or y in (0, 6)}
    corners = {(0, 0), (0, 6), (6, 0), (6, 6)}
    assert cells(object_neighbors(g)) == (frame - corners) | hole
    assert cells(object_neighbors(g, connectivity=8)) == frame | hole
    with pytest.raises(ValueError):
        object_neighbors(g, connectivity=5)


def test_interior_ignores_diagonal_leak():
    g = np.zeros((5, 5), dtype=int)
    for x, y in [(1, 1), (1, 2), (2, 1), (2, 3), (3, 1), (3, 2), (3, 3)]:
        g[x, y] = 1
    assert object_interior(g)[2, 2]
    assert not object_interior(g)[1, 3]


def test_boundary_of_solid_blocks():
    g = np.zeros((6, 6), dtype=int)
    g[1:5, 1:5] = 2
    ring = {(x, y) for x in range(1, 5) for y in range(1, 5)} - {(2, 2), (2, 3), (3, 2), (3, 3)}
    assert cells(object_boundary(g)) == ring
    g = np.zeros((4, 4), dtype=int)
    g[0:3, 0:3] = 2
    assert cells(object_boundary(g)) == {(x, y) for x in range(3) for y in range(3)} - {(1, 1)}


def test_interior_with_nonzero_background():
    g = np.where(ring_grid() == 3, 3, 8)
    assert cells(object_interior(g, background=8)) == {(x, y) for x in range(1, 6) for y in range(1, 6)}


def test_is_contiguous():
    assert is_contiguous(np.zeros((2, 2), dtype=int)) is False
    diag = np.array([[1, 0], [0, 1]])
    assert is_contiguous(diag) is False
    assert is_contiguous(diag, connectivity=8) is True
    assert is_contiguous(np.array([[1, 2], [0, 3]])) is True
    with pytest.raises(ValueError):
        is_contiguous(diag, connectivity=3)
