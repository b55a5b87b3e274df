"""Undo what a generated program did to the shared `Color` class.

`Color` is a plain mutable class (programs reassign `Color.RED = 7` or mutate
`Color.NOT_BLACK`), and a sandbox worker that keeps `common` imported between programs would leak
those changes into later programs (docs/runtime.md section 8.2). Take a snapshot once,
restore it after every program.
"""

from arc_pipeline.runtime.common import Color


def snapshot_color() -> dict:
    """The public attributes of `Color`, with the two lists copied."""
    return {
        name: (list(value) if isinstance(value, list) else value)
        for name, value in vars(Color).items()
        if not name.startswith("__")
    }


def restore_color(snapshot: dict) -> None:
    """Put `Color` back to `snapshot`: reset values, give fresh list copies, drop added names."""
    for name in [n for n in vars(Color) if not n.startswith("__") and n not in snapshot]:
        delattr(Color, name)
    for name, value in snapshot.items():
        setattr(Color, name, list(value) if isinstance(value, list) else value)
