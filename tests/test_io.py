"""io.replace_folder: a folder is swapped in whole or not at all (model folders, adapters)."""

from __future__ import annotations

import os
import stat

import pytest

from arc_pipeline.io import replace_folder


def write_folder(path, files):
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text)


def contents(path):
    return {entry.name: entry.read_text() for entry in path.iterdir()}


def test_success_replaces_the_old_folder(tmp_path):
    target = tmp_path / "out" / "model"
    write_folder(target, {"stale.txt": "old", "config.json": "{}"})
    with replace_folder(target) as staging:
        assert staging.parent == target.parent and staging != target
        assert contents(target) == {"stale.txt": "old", "config.json": "{}"}  # untouched while building
        (staging / "config.json").write_text('{"new": 1}')
    assert contents(target) == {"config.json": '{"new": 1}'}
    assert sorted(p.name for p in target.parent.iterdir()) == ["model"]  # no staging or old folder left


def test_creates_a_missing_target_and_its_parent(tmp_path):
    target = tmp_path / "a" / "b" / "adapter"
    with replace_folder(target) as staging:
        (staging / "adapter_config.json").write_text("{}")
    assert contents(target) == {"adapter_config.json": "{}"}


def test_an_error_inside_leaves_the_previous_folder_and_no_debris(tmp_path):
    target = tmp_path / "model"
    write_folder(target, {"config.json": "old"})

    def build_then_fail() -> None:
        with replace_folder(target) as staging:
            (staging / "config.json").write_text("half")
            raise RuntimeError("build failed")

    with pytest.raises(RuntimeError, match="build failed"):
        build_then_fail()
    assert contents(target) == {"config.json": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_an_error_without_a_previous_folder_leaves_nothing(tmp_path):
    def build_then_interrupt() -> None:
        with replace_folder(tmp_path / "model") as staging:
            (staging / "weights").write_text("half")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_then_interrupt()
    assert list(tmp_path.iterdir()) == []


def test_a_symlinked_target_is_replaced_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    write_folder(elsewhere, {"config.json": "theirs"})
    target = tmp_path / "model"
    target.symlink_to(elsewhere)
    with replace_folder(target) as staging:
        (staging / "config.json").write_text("ours")
    assert not target.is_symlink() and contents(target) == {"config.json": "ours"}
    assert contents(elsewhere) == {"config.json": "theirs"}  # the link's target is not touched


def test_files_get_the_modes_the_umask_allows(tmp_path):
    previous = os.umask(0o022)
    try:
        with replace_folder(tmp_path / "model") as staging:
            weights = staging / "model.safetensors"
            weights.write_text("w")
            weights.chmod(0o600)  # as safetensors writes it
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "model" / "model.safetensors").stat().st_mode) == 0o644


def test_a_write_removes_what_a_killed_write_of_the_same_file_left(tmp_path):
    from arc_pipeline.io import write_text

    leftovers = [".runs.md.k3j_9xq2.tmp", ".runs.md.old-4242"]
    others = [".runs.md.summary.abcdefgh.tmp", ".other.md.abcdefgh.tmp", "runs.md.abcdefgh.tmp"]
    for name in leftovers + others:
        (tmp_path / name).write_text("half")
    (tmp_path / ".runs.md.zzzzzzzz.tmp").mkdir()  # a staging folder of replace_folder
    write_text("whole", tmp_path / "runs.md")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*others, "runs.md"])
