"""Clean-room implementation of the BARC `common` library (docs/runtime.md).

Generated programs run `from common import *`. There is deliberately no `__all__`: the star import
exports every public module-level name, i.e. the 42 names of the BARC library (including the
re-exported `np` and the standard-library `random`) plus the [ext] compatibility names
`random_scatter_points` and `generate_position_has_interval`. Everything else here starts with `_`.

Conventions (docs/runtime.md section 1): `grid[x, y]`, x = axis 0; `background` cells are empty; quirks that
change results of deterministic functions are replicated on purpose (the BARC models were trained on
their outputs). The module is pure (no I/O besides the documented prints) and imports only numpy and
stdlib modules, so importing it is cheap.
"""

import itertools as _itertools
import math as _math
import random

import numpy as np


class Color:
    """Integer colour constants; a plain, mutable class (programs reassign attributes)."""

    BLACK = 0
    BLUE = 1
    RED = 2
    GREEN = 3
    YELLOW = 4
    GREY = 5
    GRAY = 5
    PINK = 6
    ORANGE = 7
    TEAL = 8
    MAROON = 9
    # [ext] names used by BARC-finetuned models (Teal->Purple, Maroon->Brown rewrite).
    PURPLE = 8
    BROWN = 9
    TRANSPARENT = 0
    BACKGROUND = 0
    ALL_COLORS = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    NOT_BLACK = [1, 2, 3, 4, 5, 6, 7, 8, 9]


# ---------------------------------------------------------------------------------------------
# private helpers

_OFFSETS4 = ((0, 1), (0, -1), (1, 0), (-1, 0))
_OFFSETS8 = _OFFSETS4 + ((1, 1), (1, -1), (-1, 1), (-1, -1))


def _check_connectivity(connectivity):
    if connectivity == 4:
        return _OFFSETS4
    if connectivity == 8:
        return _OFFSETS8
    raise ValueError(f"connectivity must be 4 or 8, got {connectivity!r}")


def _color_set(grid, background):
    """`set(grid.flatten()) - {background}`, built cheaply but with the same iteration order.

    A CPython set's layout depends only on the distinct elements and the order in which they were
    first inserted, so inserting the distinct values in first-occurrence order reproduces it.
    """
    flat = np.asarray(grid).ravel()
    if flat.size == 0:
        return set()
    _, first = np.unique(flat, return_index=True)
    return set(flat[np.sort(first)]) - {background}


def _label(grid, foreground, connectivity, same_value):
    """Label connected regions of `foreground` cells (numbered by first cell in row-major order).

    With `same_value`, neighbours join only when their grid values are equal. Returns
    (labels array with 0 for non-foreground, number of labels, value of each label's first cell).
    """
    offsets = _check_connectivity(connectivity)
    n, m = foreground.shape
    width = m + 2
    padded = np.zeros((n + 2, m + 2), dtype=bool)
    padded[1:-1, 1:-1] = foreground
    fg = padded.ravel().tolist()
    if same_value:
        values_padded = np.zeros((n + 2, m + 2), dtype=np.asarray(grid).dtype)
        values_padded[1:-1, 1:-1] = grid
        values = values_padded.ravel().tolist()
    flat_offsets = [dx * width + dy for dx, dy in offsets]
    labels = [0] * len(fg)
    count = 0
    for start in np.flatnonzero(padded.ravel()).tolist():
        if labels[start]:
            continue
        count += 1
        labels[start] = count
        stack = [start]
        if same_value:
            value = values[start]
            while stack:
                p = stack.pop()
                for o in flat_offsets:
                    q = p + o
                    if fg[q] and not labels[q] and values[q] == value:
                        labels[q] = count
                        stack.append(q)
        else:
            while stack:
                p = stack.pop()
                for o in flat_offsets:
                    q = p + o
                    if fg[q] and not labels[q]:
                        labels[q] = count
                        stack.append(q)
    label_array = np.array(labels, dtype=np.int32).reshape(n + 2, m + 2)[1:-1, 1:-1]
    return label_array, count


def _reach(mask, x, y, connectivity):
    """Cells of `mask` connected to (x, y) (which must be in `mask`), as a boolean array."""
    n, m = mask.shape
    width = m + 2
    padded = np.zeros((n + 2, m + 2), dtype=bool)
    padded[1:-1, 1:-1] = mask
    free = padded.ravel().tolist()
    offsets = _OFFSETS4 if connectivity == 4 else _OFFSETS8
    flat_offsets = [dx * width + dy for dx, dy in offsets]
    start = (x + 1) * width + (y + 1)
    free[start] = False
    found = [start]
    stack = [start]
    while stack:
        p = stack.pop()
        for o in flat_offsets:
            q = p + o
            if free[q]:
                free[q] = False
                found.append(q)
                stack.append(q)
    region = np.zeros((n + 2) * (m + 2), dtype=bool)
    region[found] = True
    return region.reshape(n + 2, m + 2)[1:-1, 1:-1]


def _dilate(mask, connectivity):
    """One step of binary dilation; cells outside the array count as empty."""
    out = mask.copy()
    out[1:, :] |= mask[:-1, :]
    out[:-1, :] |= mask[1:, :]
    out[:, 1:] |= mask[:, :-1]
    out[:, :-1] |= mask[:, 1:]
    if connectivity == 8:
        out[1:, 1:] |= mask[:-1, :-1]
        out[1:, :-1] |= mask[:-1, 1:]
        out[:-1, 1:] |= mask[1:, :-1]
        out[:-1, :-1] |= mask[1:, 1:]
    return out


def _component_dtype(grid):
    return np.result_type(np.asarray(grid).dtype, np.int64)


# ---------------------------------------------------------------------------------------------
# 3. deterministic grid and object functions


def flood_fill(grid, x, y, color, connectivity=4):
    """Fill, in place, the region of equal values containing (x, y); returns None."""
    old = grid[x, y]
    assert connectivity in [4, 8]
    if old == color:
        return
    n, m = grid.shape
    if isinstance(x, (int, np.integer)) and isinstance(y, (int, np.integer)) and 0 <= x < n and 0 <= y < m:
        region = _reach(grid == old, int(x), int(y), connectivity)
        grid[region] = color
        return
    # Odd starts (negative indices): BARC's recursion, done iteratively. A position is painted
    # when it still holds `old`; neighbours are bounds-checked against 0..n-1 while the start
    # itself is read and written with numpy's wrap-around.
    offsets = _OFFSETS4 if connectivity == 4 else _OFFSETS8
    stack = [(x, y)]
    while stack:
        px, py = stack.pop()
        if grid[px, py] != old:
            continue
        grid[px, py] = color
        for dx, dy in offsets:
            qx, qy = px + dx, py + dy
            if 0 <= qx < n and 0 <= qy < m and grid[qx, qy] == old:
                stack.append((qx, qy))
    return


def draw_line(grid, x, y, end_x=None, end_y=None, length=None, direction=None, color=None, stop_at_color=[]):
    """Paint an 8-direction ray in place; return the last painted cell (or the start)."""
    assert (end_x is None) == (end_y is None), "end_x and end_y must be given together"
    assert x == int(x) and y == int(y), "x and y must be integers"
    x, y = int(x), int(y)
    if end_x is not None:
        length = max(abs(end_x - x), abs(end_y - y)) + 1
        direction = (end_x - x, end_y - y)
    if length is None:
        length = 2 * max(grid.shape)
    dx, dy = direction
    dx = dx // abs(dx) if dx != 0 else 0
    dy = dy // abs(dy) if dy != 0 else 0
    n, m = grid.shape
    last_x, last_y = x, y
    for i in range(length):
        px, py = x + i * dx, y + i * dy
        if not (0 <= px < n and 0 <= py < m):
            continue
        if grid[px, py] in stop_at_color:
            break
        grid[px, py] = color
        last_x, last_y = px, py
    return last_x, last_y


def find_connected_components(grid, background=Color.BLACK, connectivity=4, monochromatic=True):
    """Full-canvas arrays, one per connected component (ordering: docs/runtime.md 3.3)."""
    _check_connectivity(connectivity)
    grid = np.asarray(grid)
    dtype = _component_dtype(grid)
    foreground = grid != background
    labels, count = _label(grid, foreground, connectivity, same_value=monochromatic)
    if count == 0:
        return []
    if monochromatic:
        # first cell of every label, in label order
        flat_labels = labels.ravel()
        _, first = np.unique(flat_labels, return_index=True)
        label_ids = flat_labels[first]
        first = first[label_ids > 0]
        label_ids = label_ids[label_ids > 0]
        first_value = grid.ravel()[first]
        ordered = []
        for color in _color_set(grid, background):
            ordered.extend(sorted(label_ids[first_value == color].tolist()))
    else:
        ordered = range(1, count + 1)
    ordered = np.asarray(list(ordered), dtype=np.int32)
    # one (k, n, m) block built at once; each component is an independent slice of it
    members = labels[None, :, :] == ordered[:, None, None]
    block = np.where(members, grid[None, :, :], np.asarray(background)).astype(dtype, copy=False)
    return list(block)


def _resolve_overlaps(objects, background):
    """Keep a large set of pairwise disjoint objects (docs/runtime.md 3.4, step 5)."""

    def key(obj):
        _, _, w, h = bounding_box(obj, background)
        return (w * h, int(np.sum(obj != background)))

    objects = sorted(objects, key=key, reverse=True)
    masks = [obj != background for obj in objects]
    count = len(objects)
    # an object overlaps another iff one of its cells is covered by two or more objects
    stacked = np.array(masks).reshape(count, -1)
    crowded = stacked.sum(axis=0) > 1
    overlapping = (stacked & crowded[None, :]).any(axis=1).tolist()
    kept = [objects[i] for i in range(count) if not overlapping[i]]
    rest = [i for i in range(count) if overlapping[i]]
    if not rest:
        return kept
    total = int(np.sum(np.logical_or.reduce([masks[i] for i in rest])))

    def search(position, union, chosen):
        if position == len(rest):
            return chosen, int(np.sum(union))
        mask = masks[rest[position]]
        if np.any(union & mask):
            return search(position + 1, union, chosen)
        taken, taken_cover = search(position + 1, union | mask, chosen + [rest[position]])
        if taken_cover == total:
            return taken, taken_cover
        skipped, skipped_cover = search(position + 1, union, chosen)
        if taken_cover > skipped_cover:
            return taken, taken_cover
        return skipped, skipped_cover

    chosen, _ = search(0, np.zeros(masks[0].shape, dtype=bool), [])
    return kept + [objects[i] for i in chosen]


def detect_objects(
    grid,
    _=None,
    predicate=None,
    background=Color.BLACK,
    monochromatic=False,
    connectivity=None,
    allowed_dimensions=None,
    colors=None,
    can_overlap=False,
):
    """Objects from connected components and/or fixed-size windows, with filters (docs/runtime.md 3.4)."""
    grid = np.asarray(grid)
    objects = []
    if connectivity:
        objects = find_connected_components(grid, background, connectivity, monochromatic)
        if colors:
            objects = [obj for obj in objects if all((v in colors) or v == background for v in np.unique(obj).tolist())]
        if predicate:
            objects = [obj for obj in objects if predicate(crop(obj, background))]
    if allowed_dimensions:
        objects = [obj for obj in objects if obj.shape in allowed_dimensions]
        components = list(objects)
        dtype = _component_dtype(grid)
        for n, m in allowed_dimensions:
            for i in range(grid.shape[0] - n + 1):
                for j in range(grid.shape[1] - m + 1):
                    window = grid[i : i + n, j : j + m]
                    if not np.any(window != background):
                        continue
                    if colors is not None and not all(
                        (v in colors) or v == background for v in np.unique(window).tolist()
                    ):
                        continue
                    if predicate is not None and not predicate(window):
                        continue
                    candidate = np.full(grid.shape, background, dtype=dtype)
                    candidate[i : i + n, j : j + m] = window
                    if any(np.array_equal(candidate, obj) for obj in components):
                        continue
                    objects.append(candidate)
    if not can_overlap and objects:
        objects = _resolve_overlaps(objects, background)
    return objects


def bounding_box(grid, background=Color.BLACK):
    """(x, y, w, h) of the non-background cells; (n, m, -n, -m) when there are none."""
    grid = np.asarray(grid)
    n, m = grid.shape
    occupied = grid != background
    rows = np.flatnonzero(occupied.any(axis=1))
    cols = np.flatnonzero(occupied.any(axis=0))
    if rows.size == 0:
        return n, m, -n, -m
    x, y = int(rows[0]), int(cols[0])
    return x, y, int(rows[-1]) - x + 1, int(cols[-1]) - y + 1


def bounding_box_mask(grid, background=Color.BLACK):
    """Boolean mask that is True inside the bounding box."""
    x, y, w, h = bounding_box(grid, background)
    mask = np.zeros(np.shape(grid), dtype=bool)
    mask[x : x + w, y : y + h] = True
    return mask


def object_position(obj, background=Color.BLACK, anchor="upper left"):
    """A named point of the object's bounding box (docs/runtime.md 3.8)."""
    anchor = anchor.lower().replace(" ", "").replace("top", "upper").replace("bottom", "lower")
    assert anchor in (
        "upperleft",
        "upperright",
        "lowerleft",
        "lowerright",
        "center",
        "uppercenter",
        "lowercenter",
        "leftcenter",
        "rightcenter",
    ), f"unknown anchor {anchor!r}"
    x, y, w, h = bounding_box(obj, background)
    left, right, upper, lower = x, x + w - 1, y, y + h - 1
    cx, cy = x + (w - 1) / 2, y + (h - 1) / 2
    point = {
        "upperleft": (left, upper),
        "upperright": (right, upper),
        "lowerleft": (left, lower),
        "lowerright": (right, lower),
        "center": (cx, cy),
        "uppercenter": (cx, upper),
        "lowercenter": (cx, lower),
        "leftcenter": (left, cy),
        "rightcenter": (right, cy),
    }[anchor]

    def tidy(v):
        return int(round(v)) if abs(v - round(v)) < 1e-6 else float(v)

    return tidy(point[0]), tidy(point[1])


def object_colors(obj, background=Color.BLACK):
    """Distinct non-background values, in CPython set order, as numpy scalars."""
    return list(_color_set(obj, background))


def crop(grid, background=Color.BLACK):
    """The bounding-box part of the grid, as a view."""
    x, y, w, h = bounding_box(grid, background)
    return grid[x : x + w, y : y + h]


def blit(grid, sprite, x=0, y=0, background=None):
    """Paste `sprite` into `grid` in place at (x, y), clipped; returns `grid`."""
    x, y = int(x), int(y)
    sprite = np.asarray(sprite)
    n, m = grid.shape
    sn, sm = sprite.shape
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + sn, n), min(y + sm, m)
    if x0 >= x1 or y0 >= y1:
        return grid
    if np.may_share_memory(grid, sprite):
        # Cell by cell, like BARC: reads of an aliased sprite see earlier writes.
        for i in range(x0 - x, x1 - x):
            for j in range(y0 - y, y1 - y):
                value = sprite[i, j]
                if background is not None and value == background:
                    continue
                grid[x + i, y + j] = value
        return grid
    part = sprite[x0 - x : x1 - x, y0 - y : y1 - y]
    if background is None:
        grid[x0:x1, y0:y1] = part
    else:
        keep = part != background
        grid[x0:x1, y0:y1][keep] = part[keep]
    return grid


def blit_sprite(grid, sprite, x, y, background=Color.BLACK):
    """`blit` with the background transparent."""
    return blit(grid, sprite, x=x, y=y, background=background)


def blit_object(grid, obj, background=Color.BLACK):
    """Paint a full-canvas object's non-background cells onto `grid`."""
    return blit(grid, obj, x=0, y=0, background=background)


def translate(obj, x, y, background=Color.BLACK):
    """A shifted copy; pixels pushed off the canvas are lost."""
    if not isinstance(x, (int, np.integer)) or not isinstance(y, (int, np.integer)):
        raise IndexError("translate needs integer shifts")
    obj = np.asarray(obj)
    n, m = obj.shape
    out = np.full(obj.shape, background, dtype=obj.dtype)
    x, y = int(x), int(y)
    sx0, sx1 = max(0, -x), min(n, n - x)
    sy0, sy1 = max(0, -y), min(m, m - y)
    if sx0 < sx1 and sy0 < sy1:
        out[sx0 + x : sx1 + x, sy0 + y : sy1 + y] = obj[sx0:sx1, sy0:sy1]
    return out


def scale_sprite(sprite, factor):
    """Each cell becomes a factor x factor block."""
    sprite = np.asarray(sprite)
    return np.kron(sprite, np.ones((factor, factor), dtype=sprite.dtype))


def scale_pattern(pattern, scale_factor):
    """Deprecated alias of `scale_sprite` (prints a notice, like BARC)."""
    print("scale_pattern: DEPRECATED, switch to scale_sprite")
    return scale_sprite(pattern, scale_factor)


def _placed_masks(object1, object2, x1, y1, x2, y2, background):
    """Masks of both objects on a common canvas (object1 at the origin, object2 at the offset)."""
    n1, m1 = object1.shape
    n2, m2 = object2.shape
    dx, dy = int(x2 - x1), int(y2 - y1)
    return (n1, m1, n2, m2, dx, dy, object1 != background, object2 != background)


def collision(_=None, object1=None, object2=None, x1=0, y1=0, x2=0, y2=0, background=Color.BLACK):
    """True iff the two placed objects share a non-background cell."""
    n1, m1, n2, m2, dx, dy, mask1, mask2 = _placed_masks(object1, object2, x1, y1, x2, y2, background)
    ax0, ay0 = max(0, dx), max(0, dy)
    ax1, ay1 = min(n1, dx + n2), min(m1, dy + m2)
    if ax0 >= ax1 or ay0 >= ay1:
        return False
    both = mask1[ax0:ax1, ay0:ay1] & mask2[ax0 - dx : ax1 - dx, ay0 - dy : ay1 - dy]
    return bool(both.any())


def contact(_=None, object1=None, object2=None, x1=0, y1=0, x2=0, y2=0, background=Color.BLACK, connectivity=4):
    """True iff the placed objects overlap or touch (4- or 8-neighbours)."""
    n1, m1, n2, m2, dx, dy, mask1, mask2 = _placed_masks(object1, object2, x1, y1, x2, y2, background)
    _check_connectivity(connectivity)
    # common canvas with a one-cell margin so that dilation never falls off
    ox, oy = min(0, dx) - 1, min(0, dy) - 1
    width = max(n1, dx + n2) - ox + 1
    height = max(m1, dy + m2) - oy + 1
    canvas1 = np.zeros((width, height), dtype=bool)
    canvas2 = np.zeros((width, height), dtype=bool)
    canvas1[-ox : -ox + n1, -oy : -oy + m1] = mask1
    canvas2[dx - ox : dx - ox + n2, dy - oy : dy - oy + m2] = mask2
    return bool(np.any(canvas1 & _dilate(canvas2, connectivity)))


def randomly_spaced_indices(max_len, n_indices, border_size=1, padding=1):
    """Sorted random indices, pairwise more than `padding` apart (Python RNG)."""
    if border_size > 0:
        inner = randomly_spaced_indices(max_len - border_size - 2, n_indices, border_size=0, padding=padding)
        return inner + border_size
    chosen = []
    while len(chosen) < n_indices:
        free = [i for i in range(max_len) if all(abs(i - c) > padding for c in chosen)]
        chosen.append(random.choice(free))
    return np.array(sorted(chosen), dtype=int)


def check_between_objects(obj1, obj2, x, y, padding=0, background=Color.BLACK):
    """True iff (x, y) lies in the straight corridor between the two objects' boxes."""
    ax, ay, aw, ah = bounding_box(obj1, background)
    bx, by, bw, bh = bounding_box(obj2, background)
    gap_x = (ax + aw <= x < bx) or (bx + bw <= x < ax)
    if gap_x and max(ay, by) + padding <= y < min(ay + ah, by + bh) - padding:
        return True
    gap_y = (ay + ah <= y < by) or (by + bh <= y < ay)
    if gap_y and max(ax, bx) + padding <= x < min(ax + aw, bx + bw) - padding:
        return True
    return False


def random_free_location_for_sprite(
    grid, sprite, background=Color.BLACK, border_size=0, padding=0, padding_connectivity=8
):
    """A random (x, y) where the sprite's pixels land only on free cells (Python RNG)."""
    occupied = np.asarray(grid) != background
    if padding > 0:
        _check_connectivity(padding_connectivity)
        for _ in range(padding):
            occupied = _dilate(occupied, padding_connectivity)
    sprite_mask = np.asarray(sprite) != background
    n, m = occupied.shape
    sn, sm = sprite_mask.shape
    candidates = []
    if sn <= n and sm <= m:
        windows = np.lib.stride_tricks.sliding_window_view(occupied, (sn, sm))
        clash = (windows & sprite_mask).any(axis=(2, 3))
        for x in range(border_size, n - border_size - sn + 1):
            for y in range(border_size, m - border_size - sm + 1):
                if not clash[x, y]:
                    candidates.append((x, y))
    if not candidates:
        raise ValueError("No free location for sprite found.")
    return random.choice(candidates)


def random_free_location_for_object(*args, **kwargs):
    """Old name of `random_free_location_for_sprite`."""
    return random_free_location_for_sprite(*args, **kwargs)


def _interior(grid, background):
    grid = np.asarray(grid)
    empty = grid == background
    labels, _ = _label(grid, empty, 4, same_value=False)
    edge = np.concatenate([labels[0, :], labels[-1, :], labels[:, 0], labels[:, -1]])
    outside = np.unique(edge[edge > 0])
    return ~np.isin(labels, outside) | ~empty


def object_interior(grid, background=Color.BLACK):
    """Non-background cells plus the background cells not reachable from the array's edge."""
    return _interior(grid, background)


def object_boundary(grid, background=Color.BLACK):
    """Object cells on the array's edge or 4-adjacent to the exterior."""
    grid = np.asarray(grid)
    occupied = grid != background
    exterior = ~_interior(grid, background)
    edge = np.zeros(grid.shape, dtype=bool)
    edge[0, :] = edge[-1, :] = True
    edge[:, 0] = edge[:, -1] = True
    return occupied & (edge | _dilate(exterior, 4))


def object_neighbors(grid, background=Color.BLACK, connectivity=4):
    """Background cells next to a boundary cell."""
    boundary = object_boundary(grid, background)
    _check_connectivity(connectivity)
    return _dilate(boundary, connectivity) & (np.asarray(grid) == background)


def is_contiguous(bitmask, background=Color.BLACK, connectivity=4):
    """True iff the non-background cells form exactly one connected component."""
    _check_connectivity(connectivity)
    bitmask = np.asarray(bitmask)
    _, count = _label(bitmask, bitmask != background, connectivity, same_value=False)
    return count == 1


# ---------------------------------------------------------------------------------------------
# 4. symmetry


def _normalise(v):
    if isinstance(v, np.ndarray):
        return v.astype(int)
    if isinstance(v, (float, np.floating)):
        return int(round(float(v)))
    return v


class Symmetry:
    """Base class; `apply` does nothing."""

    def apply(self, x, y, iters=1):
        return None


class TranslationalSymmetry(Symmetry):
    """Translation by (translate_x, translate_y)."""

    def __init__(self, translate_x, translate_y):
        self.translate_x = translate_x
        self.translate_y = translate_y

    def apply(self, x, y, iters=1):
        return (_normalise(x + iters * self.translate_x), _normalise(y + iters * self.translate_y))

    def _iter_range(self, grid_shape):
        bounds = []
        if self.translate_x != 0:
            bounds.append(_math.ceil(grid_shape[0] / abs(self.translate_x)))
        if self.translate_y != 0:
            bounds.append(_math.ceil(grid_shape[1] / abs(self.translate_y)))
        k = max(bounds) if bounds else 0
        return (-k, k + 1)

    def __repr__(self):
        return f"TranslationalSymmetry(translate_x={self.translate_x}, translate_y={self.translate_y})"

    __str__ = __repr__


class MirrorSymmetry:
    """Reflection across x = mirror_x and/or y = mirror_y (not a `Symmetry` subclass: BARC's)."""

    def __init__(self, mirror_x, mirror_y):
        self.mirror_x = mirror_x
        self.mirror_y = mirror_y

    def apply(self, x, y, iters=1):
        if iters % 2 == 0:
            return x, y
        if self.mirror_x is not None:
            x = 2 * self.mirror_x - x
        if self.mirror_y is not None:
            y = 2 * self.mirror_y - y
        return _normalise(x), _normalise(y)

    def _iter_range(self, grid_shape):
        return (0, 2)

    def __repr__(self):
        return f"MirrorSymmetry(mirror_x={self.mirror_x}, mirror_y={self.mirror_y})"

    __str__ = __repr__


class _RotationalSymmetry(Symmetry):
    """Quarter-turn rotation around (center_x, center_y); only returned by the detector."""

    def __init__(self, center_x, center_y):
        self.center_x = center_x
        self.center_y = center_y

    def apply(self, x, y, iters=1):
        u, v = x - self.center_x, y - self.center_y
        for _ in range(iters):
            u, v = v, -u
        return _normalise(u + self.center_x), _normalise(v + self.center_y)

    def _iter_range(self, grid_shape):
        return (0, 4)


_RotationalSymmetry.__name__ = "RotationalSymmetry"
_RotationalSymmetry.__qualname__ = "RotationalSymmetry"


def orbit(grid, x, y, symmetries):
    """Every in-grid image of (x, y) under combinations of the symmetries (set order)."""
    n, m = grid.shape
    ranges = [range(*s._iter_range(grid.shape)) for s in symmetries]
    points = set()
    for iterations in _itertools.product(*ranges):
        px, py = x, y
        inside = True
        for symmetry, k in zip(symmetries, iterations):
            px, py = symmetry.apply(px, py, k)
            if not (0 <= px < n and 0 <= py < m):
                inside = False
                break
        if inside:
            points.add((px, py))
    return list(points)


def _score_symmetry(grid, symmetry, ignore_colors, background=None):
    """(preserved, off-canvas, conflicts) counts of a candidate symmetry (docs/runtime.md 4.6)."""
    grid = np.asarray(grid)
    n, m = grid.shape
    occupied = ~np.isin(grid, ignore_colors)
    if background is not None:
        occupied &= grid != background
    xs, ys = np.nonzero(occupied)
    tx, ty = symmetry.apply(xs, ys)
    tx, ty = np.asarray(tx), np.asarray(ty)
    inside = (tx >= 0) & (tx < n) & (ty >= 0) & (ty < m)
    off = int(np.sum(~inside))
    a = grid[xs[inside], ys[inside]]
    b = grid[tx[inside], ty[inside]]
    preserved = int(np.sum(a == b))
    conflicts = int(np.sum((a != b) & ~np.isin(b, ignore_colors)))
    return preserved, off, conflicts


class _Scorer:
    """Scores many candidate symmetries at once (same counts as `_score_symmetry`).

    The candidates the detectors try (integer or half-integer axes and centres) map every cell
    to an exact integer cell, so their images can be computed directly as integer arrays of
    shape (candidates, occupied cells) instead of calling `apply` once per candidate.
    """

    _CHUNK = 128

    def __init__(self, grid, ignore_colors, background):
        self.grid = np.asarray(grid)
        self.n, self.m = self.grid.shape
        self.ignored = np.isin(self.grid, list(ignore_colors))
        occupied = ~self.ignored
        if background is not None:
            occupied &= self.grid != background
        self.xs, self.ys = np.nonzero(occupied)
        self.values = self.grid[self.xs, self.ys]

    def score(self, image):
        """`image(xs, ys, rows)` gives images for candidate rows; returns P, O, C arrays."""
        preserved, off, conflicts = [], [], []
        for rows in image.chunks(self._CHUNK):
            tx, ty = image(self.xs[None, :], self.ys[None, :], rows)
            inside = (tx >= 0) & (tx < self.n) & (ty >= 0) & (ty < self.m)
            tx = np.where(inside, tx, 0)
            ty = np.where(inside, ty, 0)
            b = self.grid[tx, ty]
            same = b == self.values[None, :]
            preserved.append(np.sum(same & inside, axis=1))
            off.append(np.sum(~inside, axis=1))
            conflicts.append(np.sum(~same & inside & ~self.ignored[tx, ty], axis=1))
        if not preserved:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        return np.concatenate(preserved), np.concatenate(off), np.concatenate(conflicts)


class _Images:
    """Candidate parameters as columns plus a vectorised image function."""

    def __init__(self, params, function):
        self.params = np.asarray(params, dtype=np.int64).reshape(-1, 3)
        self.function = function

    def chunks(self, size):
        for start in range(0, len(self.params), size):
            yield self.params[start : start + size]

    def __call__(self, xs, ys, rows):
        a, b, c = (rows[:, i : i + 1] for i in range(3))
        return self.function(xs, ys, a, b, c)


def detect_translational_symmetry(grid, ignore_colors=[Color.BLACK], background=None):
    """Best x and y translations (or one diagonal) that map the pattern onto itself."""
    n, m = grid.shape
    scorer = _Scorer(grid, ignore_colors, background)
    shift = _Images  # params: (dx, dy, unused)

    def kept(params):
        images = shift(params, lambda xs, ys, dx, dy, _: (xs + dx, ys + dy))
        p, o, c = scorer.score(images)
        scores = p - 0.01 * o - 100000 * c
        return [
            (float(score), TranslationalSymmetry(int(dx), int(dy)))
            for score, (dx, dy, _) in zip(scores.tolist(), images.params.tolist())
            if score > 0
        ]

    xs = kept([(k, 0, 0) for k in range(1, n)] + [(-k, 0, 0) for k in range(1, n)])
    ys = kept([(0, k, 0) for k in range(1, m)] + [(0, -k, 0) for k in range(1, m)])
    result = []
    if xs:
        result.append(max(xs, key=lambda sc: (sc[0], -sc[1].translate_x))[1])
    if ys:
        result.append(max(ys, key=lambda sc: (sc[0], -sc[1].translate_y))[1])
    if result:
        return result
    diagonal = kept([(kx, ky, 0) for kx in range(1, n) for ky in range(1, m)])
    if diagonal:
        best = max(diagonal, key=lambda sc: (sc[0], -(sc[1].translate_x + sc[1].translate_y)))
        return [best[1]]
    return []


def detect_mirror_symmetry(grid, ignore_colors=[Color.BLACK], background=None):
    """All best-scoring mirror symmetries (docs/runtime.md 4.8)."""
    n, m = grid.shape
    # params: (2 * mirror_x or -1 for None, 2 * mirror_y or -1 for None, unused)
    params = [(2 * xc + h, -1, 0) for xc in range(n) for h in (0, 1)]
    params += [(-1, 2 * yc + h, 0) for yc in range(m) for h in (0, 1)]
    params += [(2 * xc + h, 2 * yc + h, 0) for xc in range(n) for yc in range(m) for h in (0, 1)]

    def reflect(xs, ys, twice_x, twice_y, _):
        return (np.where(twice_x >= 0, twice_x - xs, xs), np.where(twice_y >= 0, twice_y - ys, ys))

    p, o, c = _Scorer(grid, ignore_colors, background).score(_Images(params, reflect))
    scores = p - 0.01 * o - 10000 * c

    def axis(twice):
        if twice < 0:
            return None
        return twice // 2 if twice % 2 == 0 else twice / 2

    best_score, best = 0, []
    for (twice_x, twice_y, _), pk, ck, score in zip(params, p.tolist(), c.tolist(), scores.tolist()):
        if ck > 0 or pk == 0:
            continue
        if score > best_score:
            best_score, best = score, [MirrorSymmetry(axis(twice_x), axis(twice_y))]
        elif score == best_score:
            best.append(MirrorSymmetry(axis(twice_x), axis(twice_y)))
    return best


def detect_rotational_symmetry(grid, ignore_colors=[Color.BLACK], background=None):
    """The best quarter-turn symmetry centre, or None (docs/runtime.md 4.9)."""
    n, m = grid.shape
    # params: (xc, yc, h) for the centre (xc + h/2, yc + h/2); one quarter turn maps
    # (x, y) to (cx + y - cy, cy - x + cx) = (xc - yc + y, xc + yc + h - x)
    params = [(xc, yc, h) for xc in range(n) for yc in range(m) for h in (0, 1)]

    def rotate(xs, ys, xc, yc, h):
        return xc - yc + ys, xc + yc + h - xs

    p, o, c = _Scorer(grid, ignore_colors, background).score(_Images(params, rotate))
    scores = p - 5 * o - 1000 * c
    if scores.size == 0:
        return None
    index = int(np.argmax(scores))  # first maximum, like a strict '>' scan
    if not scores[index] > 0:
        return None
    xc, yc, h = params[index]
    return _RotationalSymmetry(xc + h * 0.5 if h else xc, yc + h * 0.5 if h else yc)


# ---------------------------------------------------------------------------------------------
# 6. display helpers

_ANSI_CODES = (0, 4, 1, 2, 3, 7, 13, 202, 6, 196)


def show_colored_grid(grid, text=True):
    """Print the grid with ANSI colours, one line per y (text=False is not supported here)."""
    if not text:
        raise RuntimeError("show_colored_grid(text=False) needs a display; use text=True")
    grid = np.asarray(grid)
    for y in range(grid.shape[1]):
        line = ""
        for x in range(grid.shape[0]):
            value = grid[x, y]
            line += f"\033[38;5;{_ANSI_CODES[value]}m{value}\033[0m"
        print(line)


def visualize(input_generator, transform, n_examples=5, n_attempts=100):
    """Run a generator/transform pair a few times and print the examples (debugging aid)."""
    import traceback as _traceback

    examples, failures, first_failure = [], 0, None
    attempts = 0
    for _ in range(n_attempts):
        attempts += 1
        grid = input_generator()
        try:
            output = transform(grid.copy())
        except Exception:
            failures += 1
            if first_failure is None:
                first_failure = _traceback.format_exc()
            continue
        examples.append((grid, output))
        if len(examples) >= n_examples:
            break
    for i, (grid, output) in enumerate(examples):
        print(f"Example {i}")
        print("Input:")
        show_colored_grid(grid)
        print("Output:")
        show_colored_grid(output)
        print()
        print("-" * 20)
        print()
    if failures:
        print(f"{failures}/{attempts} failures ({failures / attempts}). For example:")
        print(first_failure)


# ---------------------------------------------------------------------------------------------
# 5. random generation helpers


def randomly_scatter_points(grid, color, density=0.5, background=Color.BLACK):
    """Paint random background cells (numpy global RNG) until density * size picks; in place."""
    n, m = grid.shape
    target = density * n * m
    free = int(np.sum(grid == background))
    if target > 0 and ((color != background and free < _math.ceil(target)) or free == 0):
        # BARC would loop forever here.
        raise ValueError(f"cannot scatter {_math.ceil(target)} points on {free} free cells")
    count = 0
    while count < target:
        x = np.random.randint(0, n)
        y = np.random.randint(0, m)
        if grid[x, y] == background:
            grid[x, y] = color
            count += 1
    return grid


def random_scatter_points(grid, color, density=0.5, background=Color.BLACK):
    """[ext] Old name of `randomly_scatter_points`."""
    return randomly_scatter_points(grid, color, density=density, background=background)


def generate_position_has_interval(max_len, position_num, if_padding=False):
    """[ext] Old helper: positions of `position_num` separated ones spread over `max_len`."""
    pattern = ([0, 1] * position_num + [0]) if if_padding else ([1, 0] * position_num)[:-1]
    if len(pattern) > max_len:
        return None
    for _ in range(max_len - len(pattern)):
        pattern.insert(np.random.randint(0, len(pattern)), 0)
    return np.array([i for i, v in enumerate(pattern) if v == 1], dtype=int)


def apply_symmetry(sprite, symmetry_type, background=Color.BLACK):
    """Make the sprite symmetric along axis 0 ("horizontal") or axis 1 ("vertical"), in place."""
    if symmetry_type == "horizontal":
        view = sprite
    elif symmetry_type == "vertical":
        view = sprite.T
    else:
        raise ValueError(f"unknown symmetry type {symmetry_type!r}")
    half = view.shape[0] // 2
    low = view[:half]
    high = view[::-1][:half]
    merged = np.where(low != background, low, high)
    view[:half] = merged
    view[::-1][:half] = merged
    return sprite


def apply_diagonal_symmetry(sprite, background=Color.BLACK):
    """Make a square sprite equal to its transpose, in place."""
    n, m = sprite.shape
    if n != m:
        raise ValueError("apply_diagonal_symmetry needs a square sprite")
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    merged = np.where(sprite != background, sprite, sprite.T)
    sprite[upper] = merged[upper]
    sprite.T[upper] = merged[upper]
    return sprite


def generate_sprite(
    n, m, symmetry_type, fill_percentage=0.5, max_colors=9, color_palate=None, connectivity=4, background=Color.BLACK
):
    """Random-walk sprite of size (n, m) with the given symmetry (docs/runtime.md 5.2)."""
    if color_palate is None:
        k = 1
        while k < max_colors and random.random() < 0.3:
            k += 1
        palette = random.sample([c for c in Color.ALL_COLORS if c != background], k)
    else:
        palette = color_palate
        k = len(palette)
    if all(c == background for c in palette):
        raise ValueError("generate_sprite: the palette holds only the background colour")
    if fill_percentage > 1:
        raise ValueError(f"generate_sprite: fill_percentage {fill_percentage} > 1 can never be met")

    flag = False
    if symmetry_type == "not_symmetric":
        wn, wm = n, m
        x, y = random.randint(0, n - 1), random.randint(0, m - 1)
    elif symmetry_type == "horizontal":
        wn, wm = n, m
        x, y = random.randint(0, n - 1), m // 2
    elif symmetry_type == "vertical":
        wn, wm = n, m
        x, y = n // 2, random.randint(0, m - 1)
    elif symmetry_type == "diagonal":
        wn, wm = n, m
        flag = random.choice([True, False])
        x = random.randint(0, n - 1)
        y = x if flag else n - 1 - x
    elif symmetry_type == "mirror":
        wn, wm = int(n / 2 + 0.5), int(m / 2 + 0.5)
        x, y = random.randint(0, wn - 1), random.randint(0, wm - 1)
    elif symmetry_type == "radial":
        assert n == m, "radial symmetry needs a square sprite"
        wn = wm = int(n / 2 + 0.5)
        x, y = wn - 1, wm - 1
    else:
        raise ValueError(f"unknown symmetry type {symmetry_type!r}")

    if connectivity == 4:
        moves = list(_OFFSETS4)
    elif connectivity == 8:
        moves = list(_OFFSETS8)
    else:
        raise ValueError(f"connectivity must be 4 or 8, got {connectivity!r}")

    canvas = np.full((wn, wm), background)
    color_index = 0
    while np.sum(canvas != background) < fill_percentage * canvas.size:
        canvas[x, y] = palette[color_index]
        if random.random() < 0.33:
            color_index = random.choice(range(k))
        dx, dy = random.choice(moves)
        if 0 <= x + dx < wn and 0 <= y + dy < wm:
            x, y = x + dx, y + dy

    if symmetry_type in ("horizontal", "vertical"):
        return apply_symmetry(canvas, symmetry_type, background)
    if symmetry_type == "radial":
        full = np.full((n, n), background)
        full[:wn, :wm] = canvas
        for _ in range(3):
            blit(full, np.rot90(full).copy(), 0, 0, background=background)
        return full
    if symmetry_type == "mirror":
        full = np.full((n, m), background)
        full[:wn, :wm] = canvas
        full[n - wn :, :wm] = np.flip(canvas, axis=0)
        full[:wn, m - wm :] = np.flip(canvas, axis=1)
        full[n - wn :, m - wm :] = np.flip(canvas, axis=(0, 1))
        if not is_contiguous(full, background=background, connectivity=connectivity):
            return generate_sprite(
                n,
                m,
                symmetry_type,
                fill_percentage=fill_percentage,
                color_palate=palette,
                connectivity=connectivity,
                background=background,
            )
        return full
    if symmetry_type == "diagonal":
        if flag:
            return np.flipud(apply_diagonal_symmetry(np.flipud(canvas).copy(), background))
        return apply_diagonal_symmetry(canvas, background)
    return canvas


def random_sprite(n, m, density=0.5, symmetry=None, color_palette=None, connectivity=4, background=Color.BLACK):
    """A random connected sprite touching all four sides (docs/runtime.md 5.1)."""
    n = list(n) if isinstance(n, range) else (n if isinstance(n, list) else [n])
    m = list(m) if isinstance(m, range) else (m if isinstance(m, list) else [m])
    sizes_n, sizes_m, requested, requested_density = n, m, symmetry, density
    can_square = any(a == b for a in sizes_n for b in sizes_m)
    types = ["horizontal", "vertical", "not_symmetric", "mirror"]
    if can_square:
        types += ["diagonal", "radial"]
    if not symmetry:
        symmetry = random.choice(types)
    if symmetry in ("diagonal", "radial"):
        n, m = random.choice([(a, b) for a in sizes_n for b in sizes_m if a == b])
    else:
        n = random.choice(sizes_n)
        m = random.choice(sizes_m)
    if n == 1 or m == 1:
        density = 1
    elif n == 2 or m == 2:
        density = max(density, 0.6)
    elif n == 3 or m == 3:
        density = max(density, 0.5)
    elif density == 1:
        density = 1
    else:
        density = min(max(random.gauss(density, 0.1), 0.4), 0.95)
    sprite = generate_sprite(
        n,
        m,
        symmetry_type=symmetry,
        color_palate=color_palette,
        fill_percentage=density,
        connectivity=connectivity,
        background=background,
    )
    assert is_contiguous(sprite, background=background, connectivity=connectivity), (
        "Generated sprite is not contiguous."
    )
    occupied = sprite != background
    if occupied[0, :].any() and occupied[-1, :].any() and occupied[:, 0].any() and occupied[:, -1].any():
        return sprite
    return random_sprite(
        sizes_n,
        sizes_m,
        density=requested_density,
        symmetry=requested,
        color_palette=color_palette,
        connectivity=connectivity,
        background=background,
    )
