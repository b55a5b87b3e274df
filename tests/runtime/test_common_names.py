"""What `from common import *` provides, and the `Color` class (docs/runtime.md sections 0, 2, 6.5, 9)."""

import random as stdlib_random
import subprocess
import sys

import numpy
import pytest

import arc_pipeline.runtime.common as common
from arc_pipeline.runtime.common import Color

BARC_NAMES = {
    "Color",
    "Symmetry",
    "TranslationalSymmetry",
    "MirrorSymmetry",
    "flood_fill",
    "draw_line",
    "find_connected_components",
    "randomly_scatter_points",
    "scale_pattern",
    "scale_sprite",
    "blit",
    "blit_object",
    "blit_sprite",
    "bounding_box",
    "bounding_box_mask",
    "object_position",
    "object_colors",
    "crop",
    "translate",
    "collision",
    "contact",
    "randomly_spaced_indices",
    "check_between_objects",
    "random_free_location_for_sprite",
    "random_free_location_for_object",
    "object_interior",
    "object_boundary",
    "object_neighbors",
    "orbit",
    "detect_translational_symmetry",
    "detect_mirror_symmetry",
    "detect_rotational_symmetry",
    "show_colored_grid",
    "visualize",
    "apply_symmetry",
    "apply_diagonal_symmetry",
    "is_contiguous",
    "generate_sprite",
    "random_sprite",
    "detect_objects",
    "np",
    "random",
}
EXT_NAMES = {"random_scatter_points", "generate_position_has_interval"}


def star_namespace() -> dict:
    namespace: dict = {}
    exec("from arc_pipeline.runtime.common import *", namespace)
    namespace.pop("__builtins__", None)
    return namespace


@pytest.fixture
def restore_color():
    saved = {k: v for k, v in vars(Color).items() if not k.startswith("__")}
    saved_lists = (list(Color.ALL_COLORS), list(Color.NOT_BLACK))
    yield
    for key, value in saved.items():
        setattr(Color, key, value)
    Color.ALL_COLORS[:] = saved_lists[0]
    Color.NOT_BLACK[:] = saved_lists[1]


def test_barc_exports_exactly_42_names():
    assert len(BARC_NAMES) == 42


def test_star_import_exports_exactly_the_spec_names_plus_ext():
    assert set(star_namespace()) == BARC_NAMES | EXT_NAMES


def test_no_all_and_private_helpers_hidden():
    assert not hasattr(common, "__all__")
    namespace = star_namespace()
    for hidden in (
        "_score_symmetry",
        "RotationalSymmetry",
        "itertools",
        "math",
        "List",
        "Tuple",
        "annotations",
        "scipy",
    ):
        assert hidden not in namespace


def test_reexports_are_real_modules():
    namespace = star_namespace()
    assert namespace["np"] is numpy
    assert namespace["random"] is stdlib_random


def test_color_values():
    expected = dict(
        BLACK=0,
        BLUE=1,
        RED=2,
        GREEN=3,
        YELLOW=4,
        GREY=5,
        GRAY=5,
        PINK=6,
        ORANGE=7,
        TEAL=8,
        MAROON=9,
        TRANSPARENT=0,
        BACKGROUND=0,
        PURPLE=8,
        BROWN=9,
    )
    for name, value in expected.items():
        assert getattr(Color, name) == value
        assert type(getattr(Color, name)) is int


def test_color_lists_are_ordered_lists():
    assert Color.ALL_COLORS == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert Color.NOT_BLACK == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert type(Color.ALL_COLORS) is list and type(Color.NOT_BLACK) is list
    assert stdlib_random.sample(Color.NOT_BLACK, 3)  # sets would be rejected on 3.11
    assert Color.NOT_BLACK.copy() == Color.NOT_BLACK


def test_color_is_not_iterable_and_unknown_names_fail():
    with pytest.raises(TypeError):
        iter(Color)
    with pytest.raises(AttributeError):
        Color.CYAN  # noqa: B018


def test_color_reassignment_works_but_defaults_stay(restore_color):
    Color.RED = 7
    Color.BLACK = 4
    assert Color.RED == 7
    grid = numpy.array([[0, 4]])
    # background default was captured at import time (0)
    assert common.bounding_box(grid) == (0, 1, 1, 1)


def test_color_values_work_as_numpy_values():
    grid = numpy.zeros((2, 2), dtype=int)
    grid[0, 0] = Color.PURPLE
    assert (grid == Color.TEAL).sum() == 1
    assert numpy.array(Color.ALL_COLORS)[Color.BROWN] == 9


def test_import_is_light():
    code = (
        "import sys, arc_pipeline.runtime.common; "
        "bad = [m for m in ('scipy', 'matplotlib', 'typing_extensions', 'pandas', 'torch') "
        "if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


SIGNATURES = {
    "flood_fill": "(grid, x, y, color, connectivity=4)",
    "draw_line": "(grid, x, y, end_x=None, end_y=None, length=None, direction=None, color=None, stop_at_color=[])",
    "find_connected_components": "(grid, background=0, connectivity=4, monochromatic=True)",
    "detect_objects": "(grid, _=None, predicate=None, background=0, monochromatic=False, "
    "connectivity=None, allowed_dimensions=None, colors=None, "
    "can_overlap=False)",
    "bounding_box": "(grid, background=0)",
    "bounding_box_mask": "(grid, background=0)",
    "crop": "(grid, background=0)",
    "object_position": "(obj, background=0, anchor='upper left')",
    "object_colors": "(obj, background=0)",
    "blit": "(grid, sprite, x=0, y=0, background=None)",
    "blit_sprite": "(grid, sprite, x, y, background=0)",
    "blit_object": "(grid, obj, background=0)",
    "translate": "(obj, x, y, background=0)",
    "scale_sprite": "(sprite, factor)",
    "scale_pattern": "(pattern, scale_factor)",
    "collision": "(_=None, object1=None, object2=None, x1=0, y1=0, x2=0, y2=0, background=0)",
    "contact": "(_=None, object1=None, object2=None, x1=0, y1=0, x2=0, y2=0, background=0, connectivity=4)",
    "check_between_objects": "(obj1, obj2, x, y, padding=0, background=0)",
    "object_interior": "(grid, background=0)",
    "object_boundary": "(grid, background=0)",
    "object_neighbors": "(grid, background=0, connectivity=4)",
    "is_contiguous": "(bitmask, background=0, connectivity=4)",
    "orbit": "(grid, x, y, symmetries)",
    "detect_translational_symmetry": "(grid, ignore_colors=[0], background=None)",
    "detect_mirror_symmetry": "(grid, ignore_colors=[0], background=None)",
    "detect_rotational_symmetry": "(grid, ignore_colors=[0], background=None)",
    "random_sprite": "(n, m, density=0.5, symmetry=None, color_palette=None, connectivity=4, background=0)",
    "generate_sprite": "(n, m, symmetry_type, fill_percentage=0.5, max_colors=9, "
    "color_palate=None, connectivity=4, background=0)",
    "apply_symmetry": "(sprite, symmetry_type, background=0)",
    "apply_diagonal_symmetry": "(sprite, background=0)",
    "random_free_location_for_sprite": "(grid, sprite, background=0, border_size=0, padding=0, padding_connectivity=8)",
    "random_free_location_for_object": "(*args, **kwargs)",
    "randomly_scatter_points": "(grid, color, density=0.5, background=0)",
    "randomly_spaced_indices": "(max_len, n_indices, border_size=1, padding=1)",
    "show_colored_grid": "(grid, text=True)",
    "visualize": "(input_generator, transform, n_examples=5, n_attempts=100)",
    "random_scatter_points": "(grid, color, density=0.5, background=0)",
    "generate_position_has_interval": "(max_len, position_num, if_padding=False)",
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signatures_match_the_spec(name):
    import inspect

    assert str(inspect.signature(getattr(common, name))) == SIGNATURES[name]


def test_class_constructors():
    import inspect

    assert str(inspect.signature(common.TranslationalSymmetry)) == "(translate_x, translate_y)"
    assert str(inspect.signature(common.MirrorSymmetry)) == "(mirror_x, mirror_y)"
    assert str(inspect.signature(common.Symmetry.apply)) == "(self, x, y, iters=1)"
    assert str(inspect.signature(common.MirrorSymmetry.apply)) == "(self, x, y, iters=1)"
