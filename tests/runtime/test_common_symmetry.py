"""Symmetry classes, detectors and orbit (docs/runtime.md section 4)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import arc_pipeline.runtime.common as common
from arc_pipeline.runtime.common import (
    MirrorSymmetry,
    Symmetry,
    TranslationalSymmetry,
    detect_mirror_symmetry,
    detect_rotational_symmetry,
    detect_translational_symmetry,
    orbit,
)


def diamond():
    g = np.zeros((5, 5), dtype=int)
    for x, y in [(1, 1), (3, 1), (1, 3), (3, 3)]:
        g[x, y] = 2
    g[2, 2] = 4
    return g


def test_symmetry_base_and_mirror_not_subclass():
    assert Symmetry().apply(1, 2) is None
    assert not isinstance(MirrorSymmetry(1, None), Symmetry)
    assert isinstance(TranslationalSymmetry(1, 0), Symmetry)
    with pytest.raises(AttributeError):
        orbit(np.zeros((3, 3)), 0, 0, [Symmetry()])


def test_mirror_detection_returns_all_three():
    found = detect_mirror_symmetry(diamond())
    assert [repr(s) for s in found] == [
        "MirrorSymmetry(mirror_x=2, mirror_y=None)",
        "MirrorSymmetry(mirror_x=None, mirror_y=2)",
        "MirrorSymmetry(mirror_x=2, mirror_y=2)",
    ]
    assert str(found[0]) == repr(found[0])
    assert type(found[0].mirror_x) is int


def test_rotational_detection_and_apply():
    rot = detect_rotational_symmetry(diamond())
    assert type(rot).__name__ == "RotationalSymmetry"
    assert isinstance(rot, Symmetry)
    assert (rot.center_x, rot.center_y) == (2, 2)
    assert rot.apply(1, 2) == (2, 3)
    assert rot.apply(1, 2, 2) == (3, 2)
    assert rot.apply(1, 2, iters=4) == (1, 2)
    assert rot.apply(1, 2, 0) == (1, 2)
    assert rot.apply(1, 2, -1) == (1, 2)  # quirk: negative iters do nothing
    assert set(orbit(diamond(), 1, 2, [rot])) == {(1, 2), (2, 1), (2, 3), (3, 2)}


def test_rotational_plus_shape_and_half_centre():
    plus = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]])
    rot = detect_rotational_symmetry(plus)
    assert (rot.center_x, rot.center_y) == (1, 1)
    assert rot.apply(0, 1) == (1, 2)
    assert rot.apply(1, 0) == (0, 1)
    square = np.zeros((4, 4), dtype=int)
    square[1:3, 1:3] = 6
    rot = detect_rotational_symmetry(square)
    assert (rot.center_x, rot.center_y) == (1.5, 1.5)
    point = rot.apply(1, 1)
    assert point == (1, 2) and all(type(v) is int for v in point)


def test_mirror_apply():
    m = MirrorSymmetry(2, None)
    assert m.apply(0, 1) == (4, 1)
    assert m.apply(0, 1, iters=2) == (0, 1)
    assert m.apply(0, 1, iters=-1) == (4, 1)
    half = MirrorSymmetry(1.5, None).apply(0, 1)
    assert half == (3, 1) and all(type(v) is int for v in half)
    assert MirrorSymmetry(None, None).apply(1.0, 2) == (1, 2)
    assert type(MirrorSymmetry(None, None).apply(1.0, 2, iters=2)[0]) is float
    assert MirrorSymmetry(1, 1).apply(0, 0) == (2, 2)
    xs, _ys = MirrorSymmetry(0.5, None).apply(np.array([0, 1]), np.array([0, 0]))
    assert xs.tolist() == [1, 0] and np.issubdtype(xs.dtype, np.integer)


def test_translational_detection_prefers_negative_shifts():
    g = np.zeros((8, 3), dtype=int)
    for x in range(8):
        g[x, :] = [1, 2, 3][x % 3]
    assert [repr(s) for s in detect_translational_symmetry(g)] == [
        "TranslationalSymmetry(translate_x=-3, translate_y=0)",
        "TranslationalSymmetry(translate_x=0, translate_y=-1)",
    ]


def test_translational_tiling_and_orbit():
    g = np.tile(np.array([[1, 2], [3, 4]]), (3, 3))
    found = detect_translational_symmetry(g)
    assert [(s.translate_x, s.translate_y) for s in found] == [(-2, 0), (0, -2)]
    assert set(orbit(g, 0, 0, found)) == {(x, y) for x in (0, 2, 4) for y in (0, 2, 4)}
    assert len(orbit(g, 0, 0, found)) == 9


def test_translational_diagonal_only_when_no_axis_shift():
    g = np.zeros((6, 6), dtype=int)
    for i in range(6):
        g[i, i] = 3
    found = detect_translational_symmetry(g)
    assert [(s.translate_x, s.translate_y) for s in found] == [(1, 1)]


def test_empty_grid_detectors():
    z = np.zeros((3, 3), dtype=int)
    assert detect_rotational_symmetry(z) is None
    assert detect_mirror_symmetry(z) == []
    assert detect_translational_symmetry(z) == []


def test_translational_apply_and_iter_range():
    t = TranslationalSymmetry(2, 0)
    assert t._iter_range((5, 5)) == (-3, 4)
    assert TranslationalSymmetry(0, 0)._iter_range((5, 5)) == (0, 1)
    assert set(orbit(np.zeros((5, 5)), 1, 1, [t])) == {(1, 1), (3, 1)}
    assert t.apply(1.0, 2) == (3, 2)
    assert type(t.apply(1.0, 2)[0]) is int
    assert TranslationalSymmetry(0.5, 0).apply(1, 1) == (2, 1)
    assert t.apply(1, 1, iters=-2) == (-3, 1)
    assert repr(t) == "TranslationalSymmetry(translate_x=2, translate_y=0)"


def test_orbit_drops_combinations_leaving_the_grid():
    grid = np.zeros((4, 4))
    # shifting (1, 0) by 3 leaves the grid; the mirror would bring it back to (3, 0), but the
    # combination is dropped as soon as the intermediate point is off-grid
    shift = TranslationalSymmetry(3, 0)
    mirror = MirrorSymmetry(3.5, None)
    assert orbit(grid, 1, 0, [shift, mirror]) == [(1, 0)]
    assert orbit(grid, 9, 9, []) == [(9, 9)]


def test_detectors_honour_ignore_colors_and_background():
    g = np.array([[7, 1, 1, 7], [7, 7, 7, 7]])
    found = detect_mirror_symmetry(g)
    assert [(s.mirror_x, s.mirror_y) for s in found] == [(None, 1.5)]
    found = detect_mirror_symmetry(g, ignore_colors=[7])
    assert [(s.mirror_x, s.mirror_y) for s in found] == [(0, None), (None, 1.5)]
    found = detect_mirror_symmetry(g, ignore_colors=[], background=7)
    assert [(s.mirror_x, s.mirror_y) for s in found] == [(0, None), (None, 1.5)]


# -- the detectors score candidates in bulk; check them against the one-by-one rule of docs/runtime.md 4.6 -------


def _reference_translational(grid, ignore, background):
    n, m = grid.shape

    def kept(cands):
        out = []
        for t in cands:
            p, o, c = common._score_symmetry(grid, t, ignore, background)
            score = p - 0.01 * o - 100000 * c
            if score > 0:
                out.append((score, t))
        return out

    xs = kept([TranslationalSymmetry(k, 0) for k in range(1, n)] + [TranslationalSymmetry(-k, 0) for k in range(1, n)])
    ys = kept([TranslationalSymmetry(0, k) for k in range(1, m)] + [TranslationalSymmetry(0, -k) for k in range(1, m)])
    result = []
    if xs:
        result.append(max(xs, key=lambda sc: (sc[0], -sc[1].translate_x))[1])
    if ys:
        result.append(max(ys, key=lambda sc: (sc[0], -sc[1].translate_y))[1])
    if result:
        return result
    diag = kept([TranslationalSymmetry(a, b) for a in range(1, n) for b in range(1, m)])
    if diag:
        return [max(diag, key=lambda sc: (sc[0], -(sc[1].translate_x + sc[1].translate_y)))[1]]
    return []


def _reference_mirror(grid, ignore, background):
    n, m = grid.shape
    cands = [MirrorSymmetry(xc + z, None) for xc in range(n) for z in (0, 0.5)]
    cands += [MirrorSymmetry(None, yc + z) for yc in range(m) for z in (0, 0.5)]
    cands += [MirrorSymmetry(xc + z, yc + z) for xc in range(n) for yc in range(m) for z in (0, 0.5)]
    best_score, best = 0, []
    for cand in cands:
        p, o, c = common._score_symmetry(grid, cand, ignore, background)
        if c > 0 or p == 0:
            continue
        score = p - 0.01 * o - 10000 * c
        if score > best_score:
            best_score, best = score, [cand]
        elif score == best_score:
            best.append(cand)
    return best


def _reference_rotational(grid, ignore, background):
    n, m = grid.shape
    best_score, best = 0, None
    for xc in range(n):
        for yc in range(m):
            for z in (0, 0.5):
                cand = common._RotationalSymmetry(xc + z, yc + z)
                p, o, c = common._score_symmetry(grid, cand, ignore, background)
                score = p - 5 * o - 1000 * c
                if score > best_score:
                    best_score, best = score, cand
    return best


def _describe(symmetry):
    if symmetry is None:
        return None
    return (type(symmetry).__name__, tuple((k, v, type(v)) for k, v in vars(symmetry).items()))


def _symmetric_grids():
    def build(base, kind):
        if kind == "mirror_x":
            return np.concatenate([base, base[::-1]], axis=0)
        if kind == "mirror_y":
            return np.concatenate([base, base[:, ::-1]], axis=1)
        if kind == "tile":
            return np.tile(base, (2, 3))
        if kind == "rot" and base.shape[0] == base.shape[1]:
            top = np.concatenate([base, np.rot90(base, -1)], axis=1)
            return np.concatenate([top, np.rot90(top, 2)], axis=0)
        return base

    return st.builds(
        build,
        arrays(np.int64, st.tuples(st.integers(1, 4), st.integers(1, 4)), elements=st.sampled_from([0, 0, 1, 2, 5])),
        st.sampled_from(["none", "mirror_x", "mirror_y", "tile", "rot"]),
    )


@settings(max_examples=40, deadline=None)
@given(_symmetric_grids(), st.sampled_from([([0], None), ([], None), ([5], 0), ([0, 2], None)]))
def test_detectors_match_one_by_one_scoring(grid, options):
    ignore, background = options
    got = detect_translational_symmetry(grid, ignore_colors=ignore, background=background)
    want = _reference_translational(grid, ignore, background)
    assert [_describe(s) for s in got] == [_describe(s) for s in want]
    got = detect_mirror_symmetry(grid, ignore_colors=ignore, background=background)
    want = _reference_mirror(grid, ignore, background)
    assert [_describe(s) for s in got] == [_describe(s) for s in want]
    got = detect_rotational_symmetry(grid, ignore_colors=ignore, background=background)
    assert _describe(got) == _describe(_reference_rotational(grid, ignore, background))
