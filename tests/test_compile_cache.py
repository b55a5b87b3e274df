"""`arc-pipeline --compile-cache DIR`: GPU stages point vLLM, Inductor and Triton at one shared folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from arc_pipeline import cli
from arc_pipeline.generation.compile_cache import CACHE_VARIABLES, use_compile_cache


@pytest.fixture
def clean_cache_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset while the test runs, restored after it: use_compile_cache sets os.environ itself, and a variable
    left behind would make every later workflow run in this pytest process skip the run's own cache folder.
    (delenv of an absent variable records nothing to restore, so setenv first.)"""
    for variable in CACHE_VARIABLES:
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)


@pytest.mark.usefixtures("clean_cache_variables")
def test_each_cache_gets_its_own_sub_folder(tmp_path: Path) -> None:
    chosen = use_compile_cache(tmp_path / "cache")
    assert chosen == {variable: str(tmp_path / "cache" / sub) for variable, sub in CACHE_VARIABLES.items()}
    assert all(os.environ[variable] == folder and Path(folder).is_dir() for variable, folder in chosen.items())


@pytest.mark.usefixtures("clean_cache_variables")
def test_a_folder_the_user_chose_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    chosen = use_compile_cache(tmp_path / "cache")
    assert "TRITON_CACHE_DIR" not in chosen and os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "mine")
    assert not (tmp_path / "cache" / "triton").exists()


@pytest.mark.usefixtures("clean_cache_variables")
def test_only_gpu_stages_use_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU stage given the flag (every rule shares the command prefix) leaves the environment alone."""
    parser = cli.build_parser()
    for command, expected in (("execute", {}), ("inference", {"VLLM_CACHE_ROOT": str(tmp_path / "c" / "vllm")})):
        known, _ = parser.parse_known_args(["--compile-cache", str(tmp_path / "c"), command])
        chosen = cli._use_compile_cache(known)
        assert {k: v for k, v in chosen.items() if k == "VLLM_CACHE_ROOT"} == expected
        for variable in CACHE_VARIABLES:
            monkeypatch.delenv(variable, raising=False)
