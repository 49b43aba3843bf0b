"""Fixtures shared by the tests: a mirror of the data sources served from 127.0.0.1.

The mirror serves, in the formats the real sources serve, files built from the offline data copy
(``$CONVRES_DATA_DIR``, see ``shared/data/README.md``): the Keras zip of Jena Climate (one CSV
member; here the copy's slice of the first 4,000 rows, not the full file) at ``/jena.zip``, and the
SST-2 parquet files at the Hub's ``resolve`` paths of the pinned revision. It answers ``Range``
requests (206), so a download can be resumed. ``python tests/conftest.py FOLDER`` serves one until
interrupted (the fresh-machine walk-through in the README uses it).
"""

import gzip
import http.server
import io
import os
import sys
import threading
import zipfile
from pathlib import Path

import pytest

OFFLINE = Path(os.environ.get("CONVRES_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
SLICE = "jena_climate/jena_climate_2009_2016_SUBSET_2009-01-01_to_2009-01-28_12cols.csv.gz"
REVISION = "bcdcba79d07bc864c1c254ccfcedcce55bcc9a8c"


def mirror_files(offline: Path = OFFLINE) -> dict[str, bytes]:
    """URL path -> bytes of the mirror, built from the offline copy."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("jena_climate_2009_2016.csv", gzip.decompress((offline / SLICE).read_bytes()))
    files = {"/jena.zip": buf.getvalue()}
    for split in ("train", "validation"):
        hub = f"/datasets/nyu-mll/glue/resolve/{REVISION}/sst2/{split}-00000-of-00001.parquet"
        files[hub] = (offline / "sst2" / f"{split}.parquet").read_bytes()
    return files


def serve(files: dict[str, bytes]) -> http.server.ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1 (a free port) for ``files``, in a daemon thread; ``files`` may
    change while it runs. ``server.requests`` lists ``(path, Range header)`` of every GET."""
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


if __name__ == "__main__":
    httpd = serve(mirror_files(Path(sys.argv[1])) if len(sys.argv) > 1 else mirror_files())
    print(f"HF_ENDPOINT=http://127.0.0.1:{httpd.server_address[1]} "
          f"CONVRES_JENA_URL=http://127.0.0.1:{httpd.server_address[1]}/jena.zip", flush=True)
    threading.Event().wait()
