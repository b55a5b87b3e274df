"""What `from common import *` provides, and the `Color` class (spec sections 0, 2, 6.5, 9)."""

import random as stdlib_random
import subprocess
import sys

import numpy
import pytest

import arc_pipeline.runtime.common as common
from arc_pipeline.runtime.common import Color

BARC_NAMES = {
    "Color", "Symmetry", "TranslationalSymmetry", "MirrorSymmetry",
    "flood_fill", "draw_line", "find_connected_components", "randomly_scatter_points",
    "scale_pattern", "scale_sprite", "blit", "blit_object", "blit_sprite", "bounding_box",
    "bounding_box_mask", "object_position", "object_colors", "crop", "translate", "collision",
    "contact", "randomly_spaced_indices", "check_between_objects", "random_free_location_for_sprite",
    "random_free_location_for_object", "object_interior", "object_boundary", "object_neighbors",
    "orbit", "detect_translational_symmetry", "detect_mirror_symmetry",
    "detect_rotational_symmetry", "show_colored_grid", "visualize", "apply_symmetry",
    "apply_diagonal_symmetry", "is_contiguous", "generate_sprite", "random_sprite",
    "detect_objects", "np", "random",
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
    for hidden in ("_score_symmetry", "RotationalSymmetry", "itertools", "math", "List", "Tuple",
                   "annotations", "scipy"):
        assert hidden not in namespace


def test_reexports_are_real_modules():
    namespace = star_namespace()
    assert namespace["np"] is numpy
    assert namespace["random"] is stdlib_random


def test_color_values():
    expected = dict(BLACK=0, BLUE=1, RED=2, GREEN=3, YELLOW=4, GREY=5, GRAY=5, PINK=6, ORANGE=7,
                    TEAL=8, MAROON=9, TRANSPARENT=0, BACKGROUND=0, PURPLE=8, BROWN=9)
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
    code = ("import sys, arc_pipeline.runtime.common; "
            "bad = [m for m in ('scipy', 'matplotlib', 'typing_extensions', 'pandas', 'torch') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
