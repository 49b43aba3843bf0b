"""The on-disk cache, atomic writes and the directory settings."""

import json
import os

import pytest

from convres import cache, paths


def test_atomic_write_replaces_whole_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "out.json"
    cache.atomic_write_text(path, "first")
    cache.atomic_write_text(path, "second")
    assert path.read_text() == "second"
    assert os.listdir(path.parent) == ["out.json"]


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "out.txt"
    cache.atomic_write_text(path, "old")

    def broken_replace(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(cache.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        cache.atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_cached_json_computes_once_per_configuration(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"value": len(calls)}
    a = cache.cached_json("exp", {"beta": 1.0}, compute, directory=tmp_path)
    b = cache.cached_json("exp", {"beta": 1.0}, compute, directory=tmp_path)
    c = cache.cached_json("exp", {"beta": 0.5}, compute, directory=tmp_path)
    assert a == b == {"value": 1} and c == {"value": 2} and len(calls) == 2
    assert cache.cached_json("exp", {"beta": 1.0}, compute, directory=tmp_path, refresh=True) == {"value": 3}


def test_corrupt_cache_file_is_recomputed(tmp_path):
    cache.cached_json("exp", {"x": 1}, lambda: 1, directory=tmp_path)
    (path,) = tmp_path.glob("exp-*.json")
    path.write_text("{not json")
    assert cache.cached_json("exp", {"x": 1}, lambda: 2, directory=tmp_path) == 2
    assert json.loads(path.read_text())["result"] == 2


def test_key_depends_on_configuration_version_and_source(monkeypatch):
    key = cache.cache_key({"a": 1})
    assert key == cache.cache_key({"a": 1}) != cache.cache_key({"a": 2})
    monkeypatch.setattr(cache, "__version__", "0.0.0-other")
    assert cache.cache_key({"a": 1}) != key
    monkeypatch.undo()
    monkeypatch.setattr(cache, "source_fingerprint", lambda: "edited-code")
    assert cache.cache_key({"a": 1}) != key


def test_directory_settings(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))
    assert paths.data_dir() == tmp_path / "data"
    assert paths.cache_dir() == tmp_path / "cache"
    assert paths.data_dir(tmp_path / "explicit") == tmp_path / "explicit"
    monkeypatch.delenv(paths.DATA_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.data_dir() == tmp_path / "xdg" / "convres" / "data"
