"""Where "auto" looks for tiktoken's cached file (the folders tiktoken itself reads, in its order),
and the reasons it gives, word for word, for the counter it picked."""

from __future__ import annotations

import sys
import tempfile

import pytest

from memproc.processors.token_choice import (
    ESTIMATE,
    QUICKTOK,
    TIKTOKEN,
    AutoChoice,
    auto_counter_choice,
    tiktoken_cached_file,
)
from tests.tiktoken_cache import put_in_tiktoken_cache


@pytest.fixture(autouse=True)
def no_cache_settings(monkeypatch, tmp_path):
    """Neither of tiktoken's variables set, and the temporary folder a fresh one."""
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


@pytest.fixture
def hide(monkeypatch):
    def hide(*modules: str) -> None:
        for module in modules:
            monkeypatch.setitem(sys.modules, module, None)

    return hide


def test_without_either_variable_the_file_is_looked_for_in_the_temporary_folder(tmp_path):
    assert tiktoken_cached_file("o200k_base") is None
    path = put_in_tiktoken_cache(tmp_path / "tmp" / "data-gym-cache")
    assert tiktoken_cached_file("o200k_base") == path


def test_data_gym_cache_dir_is_read_when_tiktoken_cache_dir_is_not_set(monkeypatch, tmp_path):
    path = put_in_tiktoken_cache(tmp_path / "gym")
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path / "gym"))
    assert tiktoken_cached_file("o200k_base") == path
    # TIKTOKEN_CACHE_DIR comes first, even when the file is elsewhere.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    assert tiktoken_cached_file("o200k_base") is None


def test_an_empty_cache_dir_means_caching_is_off_even_with_the_file_in_the_working_folder(
    monkeypatch, tmp_path
):
    put_in_tiktoken_cache(tmp_path / "cwd")
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert tiktoken_cached_file("o200k_base") is None
    choice = auto_counter_choice(skip=frozenset({QUICKTOK}))
    assert choice.reason == (
        "tiktoken's o200k_base file is not in its cache (disabled), and quicktok-v1 is not installed: "
        "token counts are estimates"
    )


def test_an_encoding_memproc_does_not_know_the_file_of_is_never_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert tiktoken_cached_file("r50k_base") is None
    assert tiktoken_cached_file("cl100k_base") is None


def test_the_reasons_for_each_choice(monkeypatch, tmp_path, hide):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    assert auto_counter_choice(skip=frozenset({QUICKTOK})) == AutoChoice(
        ESTIMATE,
        {},
        f"tiktoken's o200k_base file is not in its cache ({tmp_path / 'cache'}), and quicktok-v1 is not "
        "installed: token counts are estimates",
    )
    assert auto_counter_choice() == AutoChoice(
        QUICKTOK,
        {"encoding": "o200k_base"},
        f"tiktoken's o200k_base file is not in its cache ({tmp_path / 'cache'}); quicktok-v1 is installed",
    )
    path = put_in_tiktoken_cache(tmp_path / "cache")
    assert auto_counter_choice() == AutoChoice(
        TIKTOKEN, {"encoding": "o200k_base"}, f"tiktoken's o200k_base file is cached ({path})"
    )
    assert auto_counter_choice(skip=frozenset({TIKTOKEN})).reason == (
        "tiktoken failed to load it; quicktok-v1 is installed"
    )
    hide("tiktoken", "quicktok")
    choice = auto_counter_choice()
    assert choice == AutoChoice(
        ESTIMATE,
        {},
        "tiktoken is not installed, and quicktok-v1 is not installed: token counts are estimates",
    )
    assert not choice.exact


def test_only_the_estimate_is_inexact():
    assert AutoChoice(TIKTOKEN).exact and AutoChoice(QUICKTOK).exact
    assert not AutoChoice(ESTIMATE).exact


def test_a_stand_in_module_without_a_spec_counts_as_not_installed(monkeypatch):
    """find_spec cannot tell where such a module came from (it raises): auto does not count on it."""
    import types

    for name in ("tiktoken", "quicktok"):
        stand_in = types.ModuleType(name)
        stand_in.__spec__ = None
        monkeypatch.setitem(sys.modules, name, stand_in)
    assert auto_counter_choice().spec == ESTIMATE
    assert auto_counter_choice().reason.startswith(
        "tiktoken is not installed, and quicktok-v1 is not installed"
    )
