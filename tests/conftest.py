"""Shared fixtures: a data mirror on 127.0.0.1 (``python tests/conftest.py FOLDER`` serves one),
the offline copy, tiny SST-2 files, the "clear error" checks and the pages of the built site."""

import functools
import gzip
import http.server
import io
import os
import sys
import threading
import traceback
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

#: Property tests draw the same examples on every run (CI is reproducible); each test sets its number.
settings.register_profile("convres", derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile("convres")

OFFLINE = Path(os.environ.get("CONVRES_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
SLICE = "jena_climate/jena_climate_2009_2016_SUBSET_2009-01-01_to_2009-01-28_12cols.csv.gz"


def mirror_files(offline: Path = OFFLINE) -> dict[str, bytes]:
    """URL path -> bytes of the mirror, built from the offline copy."""
    from convres.data.sources import SST2_REVISION

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("jena_climate_2009_2016.csv", gzip.decompress((offline / SLICE).read_bytes()))
    files = {"/jena.zip": buf.getvalue()}
    for split in ("train", "validation"):
        hub = f"/datasets/nyu-mll/glue/resolve/{SST2_REVISION}/sst2/{split}-00000-of-00001.parquet"
        files[hub] = (offline / "sst2" / f"{split}.parquet").read_bytes()
    return files


def serve(files: dict[str, bytes]) -> http.server.ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1 for ``files`` (Range answered); ``server.requests``: every GET."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body, start = files.get(self.path), 0
            server.requests.append((self.path, self.headers.get("Range")))
            if body is not None and self.headers.get("Range", "").startswith("bytes="):
                start = int(self.headers["Range"][6:].split("-")[0])
            code = 404 if body is None else 416 if start >= len(body) > 0 else 206 if start else 200
            payload = (body or b"")[start:] if code in (200, 206) else b""
            self.send_response(code)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.requests = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def mirror(monkeypatch):
    """The mirror, with the download settings pointing at it: ``(base URL, files, server)``."""
    if not (OFFLINE / SLICE).is_file():
        pytest.skip("no offline data copy (set CONVRES_DATA_DIR)")
    files = mirror_files()
    server = serve(files)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("HF_ENDPOINT", base)
    monkeypatch.setenv("CONVRES_JENA_URL", f"{base}/jena.zip")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield base, files, server
    server.shutdown()
    server.server_close()


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path in ``folder`` (itself as ``.``) with its modification time (ns) and size."""
    stats = {p: p.lstat() for p in [folder, *folder.rglob("*")]} if folder.is_dir() else {}
    return {p.relative_to(folder).as_posix(): (st.st_mtime_ns, st.st_size) for p, st in stats.items()}


@pytest.fixture(autouse=True)
def checkout_results_untouched():
    """Fail a test that changes the checkout's ``results/`` (the committed runs): a test's pieces,
    merges and shared parts go into a temporary folder (``folder=tmp_path``, ``--results``)."""
    results = ROOT / "results"
    before = _listing(results)
    yield
    after = _listing(results)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if changed:
        pytest.fail(f"the test changed the checkout's {results}: {changed[:5]}; give it a temporary folder",
                    pytrace=False)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty results cache for the test (``tmp_path/cache``)."""
    monkeypatch.setenv("CONVRES_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def own_error():
    """``own_error(err, *names)``: a Type/Value/RuntimeError raised inside convres naming one of names."""
    def check(err: BaseException, *names: str) -> None:
        tb = traceback.extract_tb(err.__traceback__)
        assert isinstance(err, (TypeError, ValueError, RuntimeError)), f"raw {type(err).__name__}: {err}"
        assert tb and f"{os.sep}convres{os.sep}" in tb[-1].filename, f"raised outside convres: {err!r}"
        assert any(n in str(err) for n in names), f"names none of {names}: {err}"
    return check


@pytest.fixture
def clear_error(own_error):
    """``clear_error(call, *names)``: ``call()`` raises an ``own_error``; returns the error."""
    def check(call, *names: str) -> BaseException:
        with pytest.raises(Exception) as err:
            call()
        own_error(err.value, *names)
        return err.value
    return check


@pytest.fixture
def offline():
    """The offline data copy (``$CONVRES_DATA_DIR``); a test that needs it is skipped without it."""
    from convres.data import data_dir

    root = data_dir()
    if not ((root / "sst2" / "validation.parquet").is_file() and (root / "jena_climate").is_dir()):
        pytest.skip("no offline data (set CONVRES_DATA_DIR)")
    return root


@pytest.fixture
def tiny_sst2(tmp_path):
    """The smallest SST-2 settings that run every arm, on tiny SST-2 files written to ``tmp_path``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from convres.experiments import settings

    rng = np.random.default_rng(0)
    words = (["bad", "dull", "poor", "awful", "weak", "cold"],        # label 0
             ["good", "great", "fun", "fine", "nice", "warm"])        # label 1
    neutral = ["the", "film", "a", "of", "and", "is", "it", "this"]
    (tmp_path / "sst2").mkdir()
    for split, count in (("train", 24), ("validation", 12)):
        sents, labels = [], []
        for i in range(count):
            drawn = list(rng.choice(words[i % 2], 4)) + list(rng.choice(neutral, 6 + i % 3))
            rng.shuffle(drawn)
            sents.append(" ".join(drawn) + " ")
            labels.append(i % 2)
        sents, labels = sents + ["too short "], labels + [1]
        table = pa.table({"sentence": pa.array(sents, pa.string()), "label": pa.array(labels, pa.int64()),
                          "idx": pa.array(range(len(labels)), pa.int32())})
        pq.write_table(table, tmp_path / "sst2" / f"{split}.parquet")
    return dict(n_train=16, depths=[1, 2], seeds=[0, 1], probe_seeds=[7], eta_grid=[0.1, 0.2], extend=8,
                probe_steps=3, steps=6, record_every=3, check_steps=3, vocab_size=20, d=4, d_qk=4, m=4,
                bow=dict(lambdas=[1.0, 10.0], folds=2, iters=20),
                adam=dict(L=1, m=4, lr=0.01, steps=6, every=3, holdout=4, seeds=[0]),
                wide=dict(settings("sst2", "smoke")["wide"], n_train=8, m=16))


# --------------------------------------------------------------------------- the built site
ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("CONVRES_SITE_DIR", ROOT / "_build" / "html")).resolve()
SKIP_DIRS = {"_static", "_sources", "_images", "reports", "vendor"}
KINDS = {   # a test argument -> the pages of the built site it takes, by their path and HTML text
    "page": lambda path, text: True,
    "chapter": lambda path, text: "/" not in path and (ROOT / "book" / path).with_suffix(".md").is_file(),
    "explorer_page": lambda path, text: 'class="convres-explorer' in text,
    "proof_page": lambda path, text: 'class="toggle' in text and 'class="proof' in text,   # a folded proof
    "phonebreak_page": lambda path, text: "\\phonebreak" in text,
}


def skip_or_fail(reason: str):
    """Skip, or fail where ``CONVRES_SITE_REQUIRED=1`` (``make browser``) says the site must be checked."""
    if os.environ.get("CONVRES_SITE_REQUIRED") == "1":
        pytest.fail(f"{reason} (CONVRES_SITE_REQUIRED=1 makes this a failure)")
    pytest.skip(reason)


@functools.cache
def _pages(kind: str = "page") -> list[str]:
    if not (SITE / "index.html").exists():
        return []
    pages = [p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")]
    return sorted(p for p in pages if not SKIP_DIRS.intersection(p.split("/"))
                  and KINDS[kind](p, (SITE / p).read_text(errors="replace")))


def pytest_generate_tests(metafunc):
    for kind in KINDS:
        if kind in metafunc.fixturenames:
            metafunc.parametrize(kind, _pages(kind) or [f"(no {kind.replace('_', ' ')})"], indirect=True)


def _one_page(request):
    if request.param.startswith("(no "):
        skip_or_fail(f"{request.param[1:-1]} in the built site at {SITE} (build it first: make book)")
    return request.param


for _kind in KINDS:   # the fixtures page, chapter, explorer_page, ...: one page of that kind
    globals()[_kind] = pytest.fixture(name=_kind)(_one_page)


@pytest.fixture(scope="session")
def site_pages() -> list[str]:
    """Every page of the built site; skipped without one (failed where CONVRES_SITE_REQUIRED=1)."""
    if not _pages():
        skip_or_fail(f"no built site at {SITE} (build it first: make book)")
    return _pages()


@pytest.fixture(name="skip_or_fail", scope="session")
def skip_or_fail_fixture():
    """:func:`skip_or_fail` for a test: a check the built site gives nothing to check."""
    return skip_or_fail


if __name__ == "__main__":
    httpd = serve(mirror_files(Path(sys.argv[1])) if len(sys.argv) > 1 else mirror_files())
    print(f"HF_ENDPOINT=http://127.0.0.1:{httpd.server_address[1]} "
          f"CONVRES_JENA_URL=http://127.0.0.1:{httpd.server_address[1]}/jena.zip", flush=True)
    threading.Event().wait()
