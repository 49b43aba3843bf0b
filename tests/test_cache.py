"""The on-disk cache, atomic writes and the directory settings."""

import errno
import json
import os
import stat
import warnings

import pytest

from convres import cache, files, paths


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
    with pytest.warns(cache.CacheWarning, match="not valid JSON"):
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


# --- review rows 87-98: an unusable cache costs no result; a wrong entry is recomputed -------------

def _compute_counter(value):
    calls = []

    def compute():
        calls.append(1)
        return value
    return compute, calls


def test_cache_dir_that_is_a_file_is_found_before_computing_and_the_result_is_kept(tmp_path, monkeypatch):
    """Review row 94: CONVRES_CACHE_DIR is a regular file."""
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    monkeypatch.setenv(paths.CACHE_ENV, str(blocker))
    seen_at_compute = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        def compute():
            seen_at_compute.append(len(caught))
            return {"runs": [1, 2]}
        assert cache.cached_json("exp", {"x": 1}, compute) == {"runs": [1, 2]}
        assert cache.cached_json("exp", {"x": 1}, compute) == {"runs": [1, 2]}
    assert seen_at_compute == [1, 1]  # warned before the first computation, and only once
    (w,) = caught
    assert issubclass(w.category, cache.CacheWarning)
    assert str(blocker) in str(w.message) and "CONVRES_CACHE_DIR" in str(w.message)
    assert blocker.read_text() == "x"


def test_read_only_cache_dir_still_returns_the_result(tmp_path, monkeypatch):
    """Review row 95: a read-only cache folder (simulated: root ignores permission bits)."""
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(cache.tempfile, "mkstemp", read_only)
    compute, calls = _compute_counter([3.0])
    with pytest.warns(cache.CacheWarning, match="Read-only file system.*CONVRES_CACHE_DIR"):
        assert cache.cached_json("exp", {"x": 1}, compute, directory=tmp_path / "ro") == [3.0]
    assert calls == [1] and list((tmp_path / "ro").iterdir()) == []


def test_failed_write_after_computing_warns_and_returns_the_result(tmp_path, monkeypatch):
    compute, calls = _compute_counter({"v": 1})
    real_replace = os.replace

    def full_disk(src, dst):
        if str(dst).endswith(".json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst)
    monkeypatch.setattr(cache.os, "replace", full_disk)
    with pytest.warns(cache.CacheWarning, match="No space left on device.*CONVRES_CACHE_DIR"):
        assert cache.cached_json("exp", {"x": 1}, compute, directory=tmp_path) == {"v": 1}
    assert calls == [1] and os.listdir(tmp_path) == []


def test_entry_path_that_is_a_directory_costs_no_result(tmp_path):
    """Review row 92: the entry's path is a directory."""
    (tmp_path / f"exp-{cache.cache_key({'x': 1})}.json").mkdir()
    with pytest.warns(cache.CacheWarning, match="is a directory"):
        assert cache.cached_json("exp", {"x": 1}, lambda: 7, directory=tmp_path) == 7


def _entry(tmp_path, result):
    """A well-formed entry for config {"x": 1} holding ``result``, as if written by an older run."""
    cache.cached_json("exp", {"x": 1}, lambda: {"runs": []}, directory=tmp_path)
    (path,) = tmp_path.glob("exp-*.json")
    stored = json.loads(path.read_text())
    stored["result"] = result
    path.write_text(json.dumps(stored))
    return path


def _has_runs(result):
    if not isinstance(result, dict) or not isinstance(result["runs"], list):
        raise TypeError("expected a dict with a list 'runs'")


@pytest.mark.parametrize("stored", [{}, "pwned", {"runs": "x"}], ids=["row88-empty", "row89-str", "wrong-type"])
def test_well_formed_entry_of_the_wrong_form_is_recomputed(tmp_path, stored):
    """Review rows 88 and 89: ``"result": {}`` or ``"pwned"`` broke every later run."""
    path = _entry(tmp_path, stored)
    compute, calls = _compute_counter({"runs": [0.5]})
    with pytest.warns(cache.CacheWarning, match=f"ignoring {path}.*rejected by the check.*recomputing"):
        assert cache.cached_json("exp", {"x": 1}, compute, directory=tmp_path, check=_has_runs) == {"runs": [0.5]}
    assert cache.cached_json("exp", {"x": 1}, compute, directory=tmp_path, check=_has_runs) == {"runs": [0.5]}
    assert calls == [1]  # the replaced entry is served


def test_check_returning_false_rejects_the_entry(tmp_path):
    _entry(tmp_path, {"runs": []})
    with pytest.warns(cache.CacheWarning, match="rejected by the check"):
        got = cache.cached_json("exp", {"x": 1}, lambda: {"runs": [1]}, directory=tmp_path,
                                check=lambda r: len(r["runs"]) > 0)
    assert got == {"runs": [1]}


@pytest.mark.parametrize("content", [b"[" * 200_000, b"\xff\xfe garbage", b"", b'{"config": {"x": 1}, "res'],
                         ids=["row91-deep", "non-utf8", "empty", "truncated"])
def test_corrupt_entries_are_recomputed_with_a_notice(tmp_path, content):
    """Review row 91 (200,000 nested brackets raised RecursionError) and row 87."""
    cache.cached_json("exp", {"x": 1}, lambda: 1, directory=tmp_path)
    (path,) = tmp_path.glob("exp-*.json")
    path.write_bytes(content)
    with pytest.warns(cache.CacheWarning, match=f"ignoring {path} \\(not valid JSON"):
        assert cache.cached_json("exp", {"x": 1}, lambda: 2, directory=tmp_path) == 2
    assert json.loads(path.read_text())["result"] == 2


def test_entry_of_another_configuration_is_recomputed(tmp_path):
    path = _entry(tmp_path, {"runs": []})
    stored = json.loads(path.read_text())
    stored["config"] = {"x": 2}
    path.write_text(json.dumps(stored))
    with pytest.warns(cache.CacheWarning, match="another configuration"):
        assert cache.cached_json("exp", {"x": 1}, lambda: 5, directory=tmp_path) == 5


def test_stale_temporary_files_are_removed(tmp_path):
    """Review row 97: a writer killed during the write left ``.NAME.XXXX.tmp`` forever."""
    path = tmp_path / "entry.json"
    old, fresh, other = (tmp_path / ".entry.json.dead1234.tmp", tmp_path / ".entry.json.live5678.tmp",
                         tmp_path / ".other.json.dead0000.tmp")
    for f in (old, fresh, other):
        f.write_bytes(b"partial")
    two_hours_ago = os.stat(fresh).st_mtime - 2 * files.STALE_TMP_SECONDS
    os.utime(old, (two_hours_ago, two_hours_ago))
    os.utime(other, (two_hours_ago, two_hours_ago))
    files.atomic_write_text(path, "done")
    assert not old.exists()
    assert fresh.exists()   # may belong to a writer still at work
    assert other.exists()   # another file's temporaries are that write's business
    assert path.read_text() == "done"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_written_files_respect_the_umask(tmp_path, umask, mode):
    """Review row 98: files were always 0600 (mkstemp's mode)."""
    old = os.umask(umask)
    try:
        cache.atomic_write_bytes(tmp_path / "fig.png", b"png")
        cache.cached_json("exp", {"x": 1}, lambda: 1, directory=tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "fig.png").st_mode) == mode
    (entry,) = tmp_path.glob("exp-*.json")
    assert stat.S_IMODE(os.stat(entry).st_mode) == mode
