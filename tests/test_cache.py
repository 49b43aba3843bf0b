"""The results cache and the JSON writer: the key, sound entries, concurrent writers, the folder."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convres import cache
from convres.experiments import EXPERIMENTS, run_experiment
from convres.values import json_safe

floats = st.floats(allow_nan=True, allow_infinity=True)
leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**60, 2**60), floats, st.text(max_size=5),
                   floats.map(np.float64), st.integers(-9, 9).map(np.int64), st.booleans().map(np.bool_))
trees = st.recursive(leaves, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                    st.dictionaries(st.text(max_size=3), kids, max_size=4)),
                     max_leaves=20)


@settings(max_examples=300)
@given(tree=trees)
def test_every_document_is_strict_json_and_non_finite_numbers_are_null(tree):
    text = cache.dumps(tree)
    assert cache.loads(text, "it") == json_safe(tree)
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in {text}"))


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}', "{", "\xff"])
def test_what_is_not_strict_json_is_refused_naming_the_source(text):
    with pytest.raises(ValueError, match="the-file is not valid JSON"):
        cache.loads(text.encode("latin-1"), "the-file")


def test_one_computation_per_configuration_version_source_and_a_refresh(tmp_path, monkeypatch):
    calls = []

    def compute():
        calls.append(1)
        return {"n": len(calls)}
    assert cache.cached_json("e", {"b": 1}, compute, directory=tmp_path) == {"n": 1}
    assert cache.cached_json("e", {"b": 1}, compute, directory=tmp_path) == {"n": 1}
    assert cache.cached_json("e", {"b": 2}, compute, directory=tmp_path) == {"n": 2}
    assert cache.cached_json("e", {"b": 1}, compute, directory=tmp_path, refresh=True) == {"n": 3}
    monkeypatch.setattr(cache, "__version__", "0.0.0-other")
    assert cache.cached_json("e", {"b": 1}, compute, directory=tmp_path) == {"n": 4}
    monkeypatch.setattr(cache, "source_fingerprint", lambda module="": "edited")
    assert cache.cached_json("e", {"b": 1}, compute, directory=tmp_path) == {"n": 5}


def test_an_experiment_key_holds_the_data_files_and_the_device_as_asked(tmp_path, monkeypatch, fresh_cache):
    calls = []

    def runner(s, **kwargs):
        calls.append(1)
        return {"n": len(calls)}
    record = dataclasses.replace(EXPERIMENTS["rank_collapse_gd"], run=runner)
    monkeypatch.setitem(EXPERIMENTS, "rank_collapse_gd", record)
    data = tmp_path / "data"
    (data / "sst2").mkdir(parents=True)
    (data / "sst2" / "train.parquet").write_bytes(b"one")
    run = lambda: run_experiment("rank_collapse_gd", "smoke", data_dir=data).data["n"]  # noqa: E731
    assert run() == run() == 1
    (data / "sst2" / "train.parquet").write_bytes(b"two")
    assert run() == 2
    assert run_experiment("rank_collapse_gd", "smoke", data_dir=tmp_path / "no-such-folder").data["n"] == 3


ENTRY_EDITS = {
    "garbage": lambda p: p.write_bytes(b"\x00garbage"),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:10]),
    "deep": lambda p: p.write_bytes(b"[" * 100_000),
    "nan": lambda p: p.write_text(p.read_text().replace('"v":1', '"v":NaN')),
    "result edited": lambda p: p.write_text(p.read_text().replace('"v":1', '"v":2')),
    "other config": lambda p: p.write_text(p.read_text().replace('"a":1', '"a":9')),
    "a list": lambda p: p.write_text("[1, 2]"),
    "fifo": lambda p: (p.unlink(), os.mkfifo(p)),
    "link": lambda p: (p.unlink(), p.symlink_to("/etc/hostname")),
    "dangling link": lambda p: (p.unlink(), p.symlink_to(p.with_name("nowhere"))),
}


@settings(max_examples=60)
@given(edits=st.lists(st.sampled_from(sorted(ENTRY_EDITS)), min_size=1, max_size=2))
def test_an_entry_is_served_only_as_written(edits, tmp_path_factory):
    """Whatever happened to an entry, the computed result is served and the entry is sound after."""
    folder = tmp_path_factory.mktemp("cache")
    stored = {"v": 1, "x": None, "y": 0.5}
    assert cache.cached_json("e", {"a": 1}, lambda: {"v": 1, "x": np.inf, "y": np.float32(0.5)},
                             directory=folder) == stored
    (path,) = folder.iterdir()
    for edit in edits:
        if path.is_file() and not path.is_symlink():
            ENTRY_EDITS[edit](path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cache.CacheWarning)
        assert cache.cached_json("e", {"a": 1}, lambda: stored, directory=folder) == stored
    assert cache.cached_json("e", {"a": 1}, lambda: pytest.fail("recomputed"), directory=folder) == stored
    assert path.is_file() and not path.is_symlink() and [p.name for p in folder.iterdir()] == [path.name]


def test_processes_on_one_key_end_with_one_sound_entry(tmp_path):
    code = ("import time, sys; from convres.cache import cached_json; "
            "cached_json('e', {'a': 1}, lambda: time.sleep(1) or list(range(10**5)), directory=sys.argv[1])")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)]) for _ in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    (entry,) = tmp_path.iterdir()
    assert cache.loads(entry.read_bytes(), "entry")["result"][-1] == 10**5 - 1


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "out.json"
    cache.write_atomic(path, "old")
    monkeypatch.setattr(cache.os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left")))
    with pytest.raises(OSError, match="No space"):
        cache.write_atomic(path, "new")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["out.json"]
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_an_unusable_cache_folder_is_a_clear_error_before_any_work(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("x")
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "f" / "sub"))
    with pytest.raises(OSError, match=cache.CACHE_ENV):
        cache.cached_json("e", {}, lambda: pytest.fail("computed"))


@pytest.mark.parametrize("xdg", ["", "relative/dir"])
def test_an_empty_or_relative_xdg_cache_home_means_the_home_folder(monkeypatch, tmp_path, xdg):
    monkeypatch.delenv(cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    assert cache.cache_dir() == tmp_path / ".cache" / "convres" / "results"


def test_an_experiment_is_keyed_on_the_code_it_imports(tmp_path, monkeypatch):
    """An edit outside a module's imports (directly or not) keeps its fingerprint; one inside them,
    or in a package it sits in, changes it; the whole package's fingerprint sees every edit."""
    root = tmp_path / "convres"
    shutil.copytree(Path(cache.__file__).parent, root, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "_ROOT", root)

    def fingerprints():
        cache.source_fingerprint.cache_clear()
        return cache.source_fingerprint("convres.experiments.rank_collapse"), cache.source_fingerprint()

    for edited, kept in (("experiments/sst2.py", True), ("collapse.py", False), ("rank.py", False),
                         ("experiments/__init__.py", False)):
        before = fingerprints()
        with open(root / edited, "a") as f:
            f.write("\n# edited\n")
        after = fingerprints()
        assert (after[0] == before[0]) == kept and after[1] != before[1], edited
    assert cache.source_fingerprint("functools") == cache.source_fingerprint()   # not ours: every file
    cache.source_fingerprint.cache_clear()
