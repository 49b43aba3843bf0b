"""Real-data loaders on small files written here in the real formats (Jena CSV / Keras zip, SST-2 parquet)."""

import gzip
import hashlib
import http.server
import io
import socket
import threading
import warnings
import zipfile

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from convres import data
from convres.data import DataError
from convres.instances import synthetic_regression

FULL_HEADER = ",".join(f'"{c}"' for c in ("Date Time", *data.JENA_ALL_FEATURES))  # Keras: quoted
SLICE_HEADER = ",".join(("Date Time", *data.JENA_FEATURES))                      # offline slice


def jena_rows(hours=30, features=14, trailing_zeros=True, start_day=1):
    """Rows every 10 minutes from 01.01.2009 00:10, values printed like the Keras file."""
    rows = []
    for k in range(1, hours * 6 + 1):
        minutes = k * 10
        day, rem = divmod(minutes, 24 * 60)
        h, m = divmod(rem, 60)
        stamp = f"{start_day + day:02d}.01.2009 {h:02d}:{m:02d}:00"
        vals = [1000.0 + k / 100, -8.0 + np.sin(k / 7), 265.4, -8.9, 93.3, 3.33, 3.11, 0.22, 1.94,
                3.12, 1307.75, 1.03, 1.75, 152.3][:features]
        vals = [round(v, 2) for v in vals]  # the real file has two decimals
        fmt = "{:.2f}" if trailing_zeros else "{:g}"
        rows.append(",".join([stamp, *(fmt.format(v) for v in vals)]))
    return rows


def write_full_zip(folder, rows=None):
    """A zip like the Keras download: one member ``jena_climate_2009_2016.csv`` with the quoted header."""
    (folder / "jena_climate").mkdir(parents=True, exist_ok=True)
    path = folder / "jena_climate" / "jena_climate_2009_2016.csv.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("jena_climate_2009_2016.csv", "\n".join([FULL_HEADER, *(rows or jena_rows())]) + "\n")
    return path


def write_slice(folder, rows=None, header=SLICE_HEADER, name="jena_climate_2009_2016.csv"):
    (folder / "jena_climate").mkdir(parents=True, exist_ok=True)
    path = folder / "jena_climate" / name
    text = "\n".join([header, *(rows or jena_rows(features=11, trailing_zeros=False))])
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def test_full_keras_zip_and_slice_give_the_same_rows(tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    write_full_zip(full)
    write_slice(part)
    a = data.load_jena("2009-01-01 01:00", "2009-01-02 02:00", data_dir=full, freq="1h")
    b = data.load_jena("2009-01-01 01:00", "2009-01-02 02:00", data_dir=part, freq="1h")
    assert list(a.columns) == list(data.JENA_FEATURES) and a.shape == (26, 11)
    assert (a.index == b.index).all() and np.array_equal(a.to_numpy(), b.to_numpy())
    assert a.index[1] - a.index[0] == np.timedelta64(1, "h")


def test_full_file_has_all_14_features(tmp_path):
    write_full_zip(tmp_path)
    df = data.read_jena(data.jena_path(tmp_path), data.JENA_ALL_FEATURES)
    assert df.shape == (180, 14) and df.dtypes.eq("float64").all()


def test_environment_variable_sets_the_data_dir(tmp_path, monkeypatch):
    write_slice(tmp_path)
    monkeypatch.setenv("CONVRES_DATA_DIR", str(tmp_path))
    assert data.jena_path() == tmp_path / "jena_climate" / "jena_climate_2009_2016.csv"


def test_missing_files_say_how_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="reproduce jena --download.*download=True.*CONVRES_DATA_DIR"):
        data.load_jena(data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="reproduce sst2 --download.*nyu-mll/glue.*CONVRES_DATA_DIR"):
        data.load_sst2("train", data_dir=tmp_path)


def test_download_keeps_present_files(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("nothing should be downloaded")
    monkeypatch.setattr(data.jena, "fetch", no_network)
    monkeypatch.setattr(data.sst2, "_hub_parquet", no_network)
    zip_path = write_full_zip(tmp_path)
    assert data.download("jena", data_dir=tmp_path) == zip_path
    (tmp_path / "sst2").mkdir()
    (tmp_path / "sst2" / "train.parquet").write_bytes(b"present")
    (tmp_path / "sst2" / "validation.parquet").write_bytes(b"present")
    assert data.download("sst2", data_dir=tmp_path) == tmp_path / "sst2" / "train.parquet"


def test_wrong_columns(tmp_path):
    write_slice(tmp_path, header=SLICE_HEADER.replace("T (degC)", "Temp"))
    with pytest.raises(DataError, match=r"lacks the column\(s\) \['T \(degC\)'\]"):
        data.load_jena(data_dir=tmp_path)


def test_time_range_the_file_lacks(tmp_path):
    write_slice(tmp_path)
    with pytest.raises(DataError, match="covers 2009-01-01 00:10:00 .. 2009-01-02 06:00:00.*is needed"):
        data.load_jena("2009-01-01 01:00", "2009-02-01 00:00", data_dir=tmp_path)


def test_gap_in_the_hourly_rows(tmp_path):
    rows = jena_rows(features=11, trailing_zeros=False)
    del rows[35]  # 01.01.2009 06:00:00
    write_slice(tmp_path, rows=rows)
    with pytest.raises(DataError, match="irregular"):
        data.load_jena("2009-01-01 01:00", "2009-01-01 20:00", data_dir=tmp_path, freq="1h")


def test_nan_rows(tmp_path):
    rows = jena_rows(features=11, trailing_zeros=False)
    rows[4] = ",".join(rows[4].split(",")[:3] + [""] + rows[4].split(",")[4:])
    write_slice(tmp_path, rows=rows)
    with pytest.raises(DataError, match="1 row.*first at data row 4"):
        data.load_jena(data_dir=tmp_path)


def test_checksum_mismatch_of_the_offline_slice(tmp_path):
    write_slice(tmp_path, name="jena_climate_2009_2016_SUBSET_2009-01-01_to_2009-01-28_12cols.csv.gz")
    with pytest.raises(DataError, match="checksum mismatch"):
        data.load_jena(data_dir=tmp_path)


def test_bad_zip(tmp_path):
    (tmp_path / "jena_climate").mkdir()
    (tmp_path / "jena_climate" / "jena_climate_2009_2016.csv.zip").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="cannot read"):
        data.load_jena(data_dir=tmp_path)


# --- SST-2 ----------------------------------------------------------------------------------------

def write_sst2(folder, sentences, labels, split="train", schema=None):
    (folder / "sst2").mkdir(parents=True, exist_ok=True)
    table = pa.table({"sentence": pa.array(sentences, pa.string()), "label": pa.array(labels, pa.int64()),
                      "idx": pa.array(range(len(labels)), pa.int32())})
    if schema is not None:
        table = schema(table)
    path = folder / "sst2" / f"{split}.parquet"
    pq.write_table(table, path)
    return path


SENTS = ["a b c d ", "one two three four ", "too short ", "w x y z ", "e f g h ", "i j k l "]
LABELS = [0, 1, 1, 1, 0, 0]


def test_sst2_roundtrip_and_subset(tmp_path):
    write_sst2(tmp_path, SENTS, LABELS)
    df = data.load_sst2("train", data_dir=tmp_path)
    assert list(df.columns) == ["sentence", "label", "idx"] and len(df) == 6
    assert df.sentence[0] == "a b c d "  # the trailing space is kept, as on the Hub
    tokens, labels, _ = data.sst2_prefixes(df, 4, 4)
    assert tokens == [["a", "b", "c", "d"], ["one", "two", "three", "four"], ["w", "x", "y", "z"],
                      ["e", "f", "g", "h"]]
    assert labels.tolist() == [0, 1, 1, 0]
    with pytest.raises(DataError, match="only 2 sentences with label 1"):
        data.sst2_prefixes(df, 4, 6)
    with pytest.raises(ValueError, match="even integer"):
        data.sst2_prefixes(df, 4, 3)


def test_sst2_wrong_schema(tmp_path):
    write_sst2(tmp_path, SENTS, LABELS, schema=lambda t: t.rename_columns(["text", "label", "idx"]))
    with pytest.raises(DataError, match="SST-2 schema.*'sentence': 'missing'"):
        data.load_sst2("train", data_dir=tmp_path)


def test_sst2_missing_values_and_bad_labels(tmp_path):
    write_sst2(tmp_path, [*SENTS[:-1], None], LABELS)
    with pytest.raises(DataError, match="missing values, the first at row 5"):
        data.load_sst2("train", data_dir=tmp_path)
    write_sst2(tmp_path, SENTS, [0, 1, 2, 1, 0, 0])
    with pytest.raises(DataError, match="labels must be 0, 1"):
        data.load_sst2("train", data_dir=tmp_path)


def test_sst2_checksum_mismatch_against_the_manifest(tmp_path):
    path = write_sst2(tmp_path, SENTS, LABELS)
    (tmp_path / "SHA256SUMS").write_text(f"{'0' * 64}  sst2/train.parquet\n")
    with pytest.raises(DataError, match="checksum mismatch.*SHA256SUMS records 0000.*remove its line"):
        data.load_sst2("train", data_dir=tmp_path)
    (tmp_path / "SHA256SUMS").write_text(f"{data.sha256_file(path)}  ./sst2/train.parquet\n")
    df = data.load_sst2("train", data_dir=tmp_path)
    assert df.attrs["checksum"] == f"sha256 matches {tmp_path / 'SHA256SUMS'}"


def test_bad_split():
    with pytest.raises(ValueError, match="split must be one of"):
        data.sst2_path("dev")


def test_hash_embeddings_are_frozen_and_seeded():
    a = data.hash_embedding("good", 8, seed=0)
    assert torch.equal(a, data.hash_embedding("good", 8, seed=0))
    assert not torch.equal(a, data.hash_embedding("good", 8, seed=1))
    assert not torch.equal(a, data.hash_embedding("bad", 8, seed=0))
    X = data.embed_tokens([["good", "film"], ["bad", "good"]], 8)
    assert X.shape == (2, 2, 8) and torch.equal(X[0, 0], X[1, 1])
    with pytest.raises(ValueError, match="same number of tokens"):
        data.embed_tokens([["a"], ["a", "b"]], 8)


# --- the offline copies themselves (skipped where they are absent) --------------------------------

@pytest.fixture
def offline():
    from convres.paths import data_dir
    if not (data_dir() / "sst2" / "train.parquet").is_file():
        pytest.skip("no offline data (set CONVRES_DATA_DIR)")
    return data_dir()


def test_offline_copies(offline):
    df = data.load_jena("2009-01-01 01:00", "2009-01-28 17:00", data_dir=offline, freq="1h")
    assert df.shape == (665, 11)
    assert df.iloc[0]["T (degC)"] == pytest.approx(-8.05, abs=0.5)
    s = data.load_sst2("train", data_dir=offline)
    assert len(s) == 67_349 and s.label.sum() == 37_569
    if (offline / "SHA256SUMS").is_file():  # the offline copy ships one
        assert s.attrs["checksum"] == f"sha256 matches {offline / 'SHA256SUMS'}"


def test_embedding_arguments_are_checked():
    with pytest.raises(ValueError, match="d \\(the embedding dimension\\)"):
        data.hash_embedding("film", 0)
    with pytest.raises(TypeError, match="token must be a str"):
        data.hash_embedding(3, 4)
    with pytest.raises(ValueError, match="non-empty"):
        data.embed_tokens([], 4)



# --- review rows 72-86: bad values, times and files are named; nothing wrong is accepted -----------

def slice_rows(cells):
    """The slice's rows with ``cells`` = {(data row, column): text} replaced."""
    rows = jena_rows(features=11, trailing_zeros=False)
    for (i, column), text in cells.items():
        fields = rows[i].split(",")
        fields[1 + data.JENA_FEATURES.index(column)] = text
        rows[i] = ",".join(fields)
    return rows


@pytest.mark.parametrize("column", ["T (degC)", "p (mbar)"])
def test_sentinel_is_rejected_naming_file_row_time_and_column(tmp_path, column):
    """Review row 73: one -9999 on an hourly row was accepted and erased the beta effect."""
    path = write_slice(tmp_path, rows=slice_rows({(5, column): "-9999"}))
    with pytest.raises(DataError) as err:
        data.load_jena("2009-01-01 01:00", "2009-01-02 02:00", data_dir=tmp_path, freq="1h")
    msg = str(err.value)
    assert str(path) in msg and "sentinel -9999" in msg
    assert f"data row 5 (line 7, 01.01.2009 01:00:00), column {column!r}" in msg


@pytest.mark.parametrize("text", ["inf", "-inf", "Infinity"])
def test_infinite_values_are_rejected_with_the_row(tmp_path, text):
    """Review row 74: a literal inf passed the NaN check and failed much later, naming no file."""
    write_slice(tmp_path, rows=slice_rows({(8, "p (mbar)"): text}))
    with pytest.raises(DataError, match=r"infinite values in \['p \(mbar\)'\], the first at data row 8 "
                                        r"\(line 10, 01.01.2009 01:30:00\)"):
        data.load_jena(data_dir=tmp_path)


@pytest.mark.parametrize("column, text", [
    ("p (mbar)", "1e308"),       # review row 75: the std overflowed and the feature became all zeros
    ("p (mbar)", "99.6"),        # a lost digit
    ("T (degC)", "80"),
    ("Tpot (K)", "-8.02"),       # degC written into a kelvin column
    ("rh (%)", "130"),
    ("VPact (mbar)", "-1"),
    ("rho (g/m**3)", "1.3"),     # kg/m**3 instead of g/m**3
])
def test_values_outside_the_physical_range_are_rejected(tmp_path, column, text):
    write_slice(tmp_path, rows=slice_rows({(3, column): text}))
    lo, hi = data.JENA_BOUNDS[column]
    with pytest.raises(DataError) as err:
        data.load_jena(data_dir=tmp_path)
    msg = str(err.value)
    assert "outside the physical range" in msg and f"column {column!r}" in msg
    assert f"{column} must lie in {lo:g} .. {hi:g}" in msg and "data row 3 (line 5" in msg


def test_humidity_slightly_above_100_is_accepted(tmp_path):
    write_slice(tmp_path, rows=slice_rows({(3, "rh (%)"): "100.4", (4, "VPdef (mbar)"): "-0.01"}))
    df = data.load_jena(data_dir=tmp_path)
    assert df["rh (%)"].max() == 100.4


def test_the_wind_sentinel_of_the_full_file_is_rejected_only_where_read(tmp_path):
    rows = jena_rows()
    fields = rows[2].split(",")
    fields[1 + data.JENA_ALL_FEATURES.index("wv (m/s)")] = "-9999.00"
    rows[2] = ",".join(fields)
    path = write_full_zip(tmp_path, rows)
    assert data.read_jena(path).shape == (180, 11)  # the book's 11 features have no wind
    with pytest.raises(DataError, match=r"sentinel -9999.*'wv \(m/s\)'"):
        data.read_jena(path, data.JENA_ALL_FEATURES)


def test_duplicate_time_is_named(tmp_path):
    """Review row 76: duplicates were reported without naming the time."""
    rows = jena_rows(features=11, trailing_zeros=False)
    rows.insert(36, rows[35])  # 01.01.2009 06:00:00 twice
    write_slice(tmp_path, rows=rows)
    with pytest.raises(DataError, match=r"duplicate time 2009-01-01 06:00:00 at data rows 35 and 36 "
                                        r"\(lines 37 and 38\)"):
        data.load_jena("2009-01-01 01:00", "2009-01-01 20:00", data_dir=tmp_path, freq="1h")


def test_gap_names_the_first_missing_time(tmp_path):
    rows = jena_rows(features=11, trailing_zeros=False)
    del rows[35]
    write_slice(tmp_path, rows=rows)
    with pytest.raises(DataError, match=r"1 time\(s\) missing, the first 2009-01-01 06:00:00"):
        data.load_jena("2009-01-01 01:00", "2009-01-01 20:00", data_dir=tmp_path, freq="1h")


@pytest.mark.parametrize("freq", ["1h", None])
def test_rows_out_of_time_order_are_named_without_window_advice(tmp_path, freq):
    """Review row 77: shuffled rows were called 'irregular; choose another window'."""
    rows = jena_rows(features=11, trailing_zeros=False)
    rows[11], rows[23] = rows[23], rows[11]  # 02:00 and 04:00 swap places
    write_slice(tmp_path, rows=rows)
    with pytest.raises(DataError) as err:
        data.load_jena("2009-01-01 01:00", "2009-01-01 20:00", data_dir=tmp_path, freq=freq)
    msg = str(err.value)
    assert "not in increasing order" in msg and "Sort the file by 'Date Time'" in msg
    assert "window" not in msg


def test_empty_and_header_only_files(tmp_path):
    """Review row 78: 'No columns to parse from file'; header only: 'choose another window'."""
    path = write_slice(tmp_path)
    path.write_bytes(b"")
    with pytest.raises(DataError, match=f"{path} is empty .*download or copy it again"):
        data.load_jena(data_dir=tmp_path)
    path.write_text(SLICE_HEADER + "\n")
    with pytest.raises(DataError, match="has a header but no data rows") as err:
        data.load_jena("2009-01-01 01:00", "2009-01-02 02:00", data_dir=tmp_path, freq="1h")
    assert "window" not in str(err.value)


def test_directory_in_place_of_a_data_file_is_reported(tmp_path):
    """Review row 81: such directories were skipped silently, then 'not found'."""
    write_slice(tmp_path)  # a real file later in the search order
    (tmp_path / "jena_climate" / "jena_climate_2009_2016.csv.zip").mkdir()
    with pytest.raises(DataError, match=r"jena_climate_2009_2016\.csv\.zip is a directory, not a data file"):
        data.load_jena(data_dir=tmp_path)
    (tmp_path / "sst2" / "train.parquet").mkdir(parents=True)
    with pytest.raises(DataError, match=r"train\.parquet is a directory, not a data file"):
        data.load_sst2("train", data_dir=tmp_path)


def test_zip_with_macos_metadata_is_read(tmp_path):
    (tmp_path / "jena_climate").mkdir()
    path = tmp_path / "jena_climate" / "jena_climate_2009_2016.csv.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("jena_climate_2009_2016.csv", "\n".join([FULL_HEADER, *jena_rows()]) + "\n")
        z.writestr("__MACOSX/._jena_climate_2009_2016.csv", b"\0\5\26\7")
    assert data.load_jena(data_dir=tmp_path).shape == (180, 11)


def exact_size_parquet(path, size):
    """A valid SST-2 parquet of exactly ``size`` bytes (padded by an extra column the loader ignores)."""
    def write(k):
        table = pa.table({"sentence": pa.array(SENTS), "label": pa.array(LABELS, pa.int64()),
                          "idx": pa.array(range(len(LABELS)), pa.int32()),
                          "note": pa.array([b"x" * k] + [b""] * (len(LABELS) - 1), pa.binary())})
        pq.write_table(table, path, compression="none", use_dictionary=False, write_statistics=False)
        return path.stat().st_size
    k = size - write(0)
    for _ in range(5):
        got = write(k)
        if got == size:
            return path
        k += size - got
    raise AssertionError(f"could not write {size} bytes")


def test_own_parquet_of_the_published_size_is_not_called_corrupt(tmp_path):
    """Review row 84: a user's own file of exactly 2,970,520 B was called corrupt."""
    (tmp_path / "sst2").mkdir()
    path = exact_size_parquet(tmp_path / "sst2" / "train.parquet", 2_970_520)
    assert path.stat().st_size == 2_970_520  # the size of the offline copy's train.parquet
    df = data.load_sst2("train", data_dir=tmp_path)
    assert len(df) == 6
    assert df.attrs["checksum"].startswith("not verified: no checksum is recorded")
    assert data.load_sst2("train", data_dir=tmp_path, verify=False).attrs["checksum"].startswith("not checked")


def test_malformed_manifest_line_is_named(tmp_path):
    write_sst2(tmp_path, SENTS, LABELS)
    (tmp_path / "SHA256SUMS").write_text("# made by hand\n\nabc  sst2/train.parquet\n")
    with pytest.raises(DataError, match=r"SHA256SUMS, line 3: expected '<sha256>  <path>'"):
        data.load_sst2("train", data_dir=tmp_path)


def test_manifest_checks_the_jena_file_too(tmp_path):
    path = write_full_zip(tmp_path)
    (tmp_path / "SHA256SUMS").write_text(f"{'1' * 64}  jena_climate/{path.name}\n")
    with pytest.raises(DataError, match="checksum mismatch"):
        data.load_jena(data_dir=tmp_path)


# --- downloads, against a server on 127.0.0.1 that the tests run ----------------------------------

@pytest.fixture
def server():
    """A local HTTP server: ``files[path] = bytes`` is served with 200, anything else is a 404."""
    files = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", files
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def keras_zip_bytes(rows=None):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("jena_climate_2009_2016.csv", "\n".join([FULL_HEADER, *(rows or jena_rows())]) + "\n")
    return buf.getvalue()


def test_download_failure_names_the_url_and_the_offline_alternative(tmp_path, server, monkeypatch):
    """Review row 85: '<urlopen error [Errno -2] Name or service not known>' and nothing else."""
    base, _ = server
    monkeypatch.setattr(data.jena, "JENA_URL", f"{base}/missing.zip")
    with pytest.raises(DataError) as err:
        data.download("jena", data_dir=tmp_path)
    msg = str(err.value)
    assert f"{base}/missing.zip" in msg and "Not Found" in msg
    assert "CONVRES_DATA_DIR" in msg and str(tmp_path / "jena_climate" / "jena_climate_2009_2016.csv.zip") in msg
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(data.jena, "JENA_URL", f"http://127.0.0.1:{port}/jena.zip")
    with pytest.raises(DataError, match=f"could not download .*127.0.0.1:{port}/jena.zip.*CONVRES_DATA_DIR"):
        data.download("jena", data_dir=tmp_path)
    assert not (tmp_path / "jena_climate").exists()


def test_download_checks_the_zip_and_records_its_checksum(tmp_path, server, monkeypatch):
    base, files = server
    files["/jena.zip"] = payload = keras_zip_bytes()
    monkeypatch.setattr(data.jena, "JENA_URL", f"{base}/jena.zip")
    with pytest.warns(data.DataWarning, match="43,153,776 bytes.*unverified, so the file is used"):
        path = data.download("jena", data_dir=tmp_path)
    assert path.read_bytes() == payload
    assert (tmp_path / "SHA256SUMS").read_text() == f"{hashlib.sha256(payload).hexdigest()}  jena_climate/{path.name}\n"
    assert data.load_jena(data_dir=tmp_path).shape == (180, 11)  # verified against the manifest
    path.write_bytes(payload[:-1] + b"!")
    with pytest.raises(DataError, match="checksum mismatch"):
        data.load_jena(data_dir=tmp_path)


def test_zip_matching_the_recorded_csv_is_verified(monkeypatch):
    payload = keras_zip_bytes()
    csv = zipfile.ZipFile(io.BytesIO(payload)).read("jena_climate_2009_2016.csv")
    monkeypatch.setattr(data.jena, "JENA_CSV_SIZE", len(csv))
    monkeypatch.setattr(data.jena, "JENA_CSV_SHA256", hashlib.sha256(csv).hexdigest())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert data.check_jena_zip(payload) == "verified"


@pytest.mark.parametrize("body", [b"<html>captive portal</html>", "truncated"])
def test_download_that_is_not_a_good_zip_writes_nothing(tmp_path, server, monkeypatch, body):
    base, files = server
    payload = keras_zip_bytes()
    files["/jena.zip"] = payload[: len(payload) // 2] if body == "truncated" else body
    monkeypatch.setattr(data.jena, "JENA_URL", f"{base}/jena.zip")
    with pytest.raises(DataError, match=f"{base}/jena.zip is not a readable zip.*Nothing was saved"):
        data.download("jena", data_dir=tmp_path)
    assert not (tmp_path / "jena_climate" / "jena_climate_2009_2016.csv.zip").exists()


def test_zip_with_a_damaged_member_is_rejected():
    payload = bytearray(keras_zip_bytes())
    payload[60] ^= 0xFF  # inside the compressed CSV: the CRC-32 no longer matches
    with pytest.raises(DataError, match="not a readable zip"):
        data.check_jena_zip(bytes(payload))


class FakeDataset:
    def __init__(self, table):
        self.table = table

    def to_parquet(self, buf):
        pq.write_table(self.table, buf)


def test_sst2_download_is_pinned_to_a_revision(tmp_path, monkeypatch):
    import datasets

    calls = []
    table = pa.table({"sentence": pa.array(SENTS), "label": pa.array(LABELS, pa.int64()),
                      "idx": pa.array(range(6), pa.int32())})
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: calls.append((a, k)) or FakeDataset(table))
    path = data.download("sst2", data_dir=tmp_path)
    assert calls == [(("nyu-mll/glue", "sst2"), {"split": split, "revision": data.SST2_REVISION})
                     for split in ("train", "validation")]
    assert len(data.SST2_REVISION) == 40 and int(data.SST2_REVISION, 16) >= 0  # a commit, not a branch
    assert path == tmp_path / "sst2" / "train.parquet"
    df = data.load_sst2("train", data_dir=tmp_path)
    assert len(df) == 6 and df.attrs["checksum"] == f"sha256 matches {tmp_path / 'SHA256SUMS'}"


def test_sst2_download_failure_names_dataset_revision_and_offline_alternative(tmp_path, monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub (LocalEntryNotFoundError)")
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match=f"'nyu-mll/glue', config 'sst2', split 'train' at revision "
                                        f"{data.SST2_REVISION}.*ConnectionError.*CONVRES_DATA_DIR"):
        data.download("sst2", data_dir=tmp_path)
    assert not (tmp_path / "sst2" / "train.parquet").exists()


# --- standardize and integer arguments ------------------------------------------------------------

def test_standardize_matches_the_z_scores():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 3)) * [1, 10, 100] + [0, 5, 1000]
    z = data.standardize(x, ["a", "b", "c"])
    assert np.array_equal(z, (x - x.mean(0)) / x.std(0))
    assert np.allclose(z.mean(0), 0) and np.allclose(z.std(0), 1)


def test_standardize_names_constant_and_non_finite_features():
    x = np.column_stack([np.arange(5.0), np.full(5, 1307.75), np.arange(5.0)])
    with pytest.raises(DataError, match=r"\['rho'\] are constant over Jan: they cannot be standardized"):
        data.standardize(x, ["p", "rho", "T"], context=" over Jan")
    x = np.column_stack([np.arange(5.0), [996.5, 996.6, 1e308, 996.4, 996.5]])
    with pytest.raises(DataError, match=r"\['p'\] have a non-finite standard deviation"):
        data.standardize(x, ["T", "p"])
    x[2, 1] = np.inf
    with pytest.raises(DataError, match=r"\['p'\] hold non-finite values \(the first at row 2"):
        data.standardize(x, ["T", "p"])
    with pytest.raises(ValueError, match="one of names"):
        data.standardize(x, ["T"])
    with pytest.raises(DataError, match="at least 2"):
        data.standardize(x[:1], ["T", "p"])


def test_numpy_integers_are_accepted_and_bools_are_not():
    X, Y = synthetic_regression(np.int64(2), np.int32(3), np.int64(4))
    assert X.shape == (2, 3, 4) and Y.shape == (2, 3, 1)
    assert torch.equal(data.hash_embedding("film", np.int64(8), np.int64(1)), data.hash_embedding("film", 8, 1))
    df = pd.DataFrame({"sentence": SENTS, "label": LABELS})
    assert data.sst2_prefixes(df, np.int64(4), np.int64(4))[1].tolist() == [0, 1, 1, 0]
    with pytest.raises(ValueError, match="N must be a positive integer, got True"):
        synthetic_regression(True, 3, 4)
    with pytest.raises(ValueError, match="even integer"):
        data.sst2_prefixes(df, 4, np.float64(4))


# --- SST-2 at a fixed length, PPMI word vectors (chapter SST-2) ----------------------------------

LONG = ["a good fun film here ", "a bad dull film here x ", "no ", "good fun and good film ",
        "dull and bad and dull ", "bad film ", "fun good good fun film "]
LONG_LABELS = [1, 0, 0, 1, 0, 0, 1]


def test_sst2_prefixes_cut_sentences_of_at_least_n_tokens():
    df = pd.DataFrame({"sentence": LONG, "label": LONG_LABELS})
    tokens, labels, rows = data.sst2_prefixes(df, 5)
    assert rows.tolist() == [0, 1, 3, 4, 6]              # every sentence with >= 5 tokens, file order
    assert tokens[1] == ["a", "bad", "dull", "film", "here"] and all(len(t) == 5 for t in tokens)
    assert labels.tolist() == [1, 0, 1, 0, 1]
    tokens, labels, rows = data.sst2_prefixes(df, 5, size=4)   # balanced: the first 2 of each label
    assert rows.tolist() == [0, 1, 3, 4] and labels.tolist() == [1, 0, 1, 0]
    with pytest.raises(DataError, match="only 2 sentences with label 0 and at least 5 tokens; need 3"):
        data.sst2_prefixes(df, 5, size=6)
    with pytest.raises(DataError, match="no sentence has at least 9 tokens"):
        data.sst2_prefixes(df, 9)
    with pytest.raises(ValueError, match="size must be an even integer"):
        data.sst2_prefixes(df, 5, size=3)
    with pytest.raises(ValueError, match="n_tokens must be a positive integer"):
        data.sst2_prefixes(df, 0)
    test = pd.DataFrame({"sentence": LONG, "label": [-1] * len(LONG)})
    with pytest.raises(DataError, match="a labelled split, not 'test'"):
        data.sst2_prefixes(test, 5)


def test_ppmi_embeddings_are_deterministic_and_follow_cooccurrence():
    sents = [s.split() for s in LONG] * 3
    vocab, E = data.ppmi_embeddings(sents, 3, vocab_size=8)
    vocab2, E2 = data.ppmi_embeddings(sents, 3, vocab_size=8)
    assert vocab == vocab2 and np.array_equal(E, E2)
    assert E.shape == (8, 3) and len(vocab) == 8
    counts = {t: sum(s.count(t) for s in sents) for t in vocab}
    order = sorted(counts, key=lambda t: (-counts[t], t))
    assert vocab == order                                  # most frequent first, ties alphabetical
    assert (E[np.abs(E).argmax(0), range(3)] > 0).all()    # the largest entry of each column is positive
    # with d = len(vocab) the vectors reproduce the PPMI matrix: U S^(1/2) (U S^(1/2))^T = U S U^T
    vocab, E = data.ppmi_embeddings(sents, 8, vocab_size=8, iterations=20)
    unit = E / np.linalg.norm(E, axis=1, keepdims=True)
    i = {t: k for k, t in enumerate(vocab)}
    assert unit[i["good"]] @ unit[i["fun"]] > unit[i["good"]] @ unit[i["dull"]]


def test_ppmi_embedding_arguments_are_checked():
    sents = [s.split() for s in LONG]
    with pytest.raises(ValueError, match="d \\(the embedding dimension\\)"):
        data.ppmi_embeddings(sents, 0)
    with pytest.raises(ValueError, match="exceeds the vocabulary"):
        data.ppmi_embeddings(sents, 50)
    with pytest.raises(ValueError, match="smoothing must be a number in \\(0, 1\\]"):
        data.ppmi_embeddings(sents, 2, smoothing=0)
    with pytest.raises(ValueError, match="non-empty list of non-empty token lists"):
        data.ppmi_embeddings([["a"], []], 2)
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 2"):
        data.ppmi_embeddings(sents, 2, vocab_size=1)


def test_embed_with_standardizes_over_the_given_tokens_and_zeroes_unknown_ones():
    vocab, vectors = ["a", "b", "c"], np.array([[1.0, 10.0], [3.0, 30.0], [5.0, 20.0]])
    X, (mean, std), oov = data.embed_with([["a", "b"], ["c", "a"]], vocab, vectors)
    seen = vectors[[0, 1, 2, 0]]
    assert np.allclose(mean, seen.mean(0)) and np.allclose(std, seen.std(0)) and oov == 0
    flat = X.reshape(-1, 2).numpy()
    assert np.allclose(flat.mean(0), 0) and np.allclose(flat.std(0), 1)
    Xv, _, oov_v = data.embed_with([["a", "zzz"]], vocab, vectors, mean=mean, std=std)
    assert oov_v == 0.5 and torch.equal(Xv[0, 1], torch.zeros(2, dtype=torch.float64))
    assert torch.allclose(Xv[0, 0], X[0, 0])                # the training statistics are reused
    with pytest.raises(ValueError, match="same number of tokens"):
        data.embed_with([["a"], ["a", "b"]], vocab, vectors)
    with pytest.raises(ValueError, match="no token of sentences is in the vocabulary"):
        data.embed_with([["x", "y"]], vocab, vectors)
    with pytest.raises(ValueError, match=r"\(len\(vocab\), d\) array"):
        data.embed_with([["a"]], vocab, vectors[:2])
    with pytest.raises(ValueError, match="finite, positive standard deviation"):
        data.embed_with([["a"]], vocab, vectors, mean=np.zeros(2), std=np.array([1.0, 0.0]))


def test_jena_task_names_constant_features_of_the_training_rows(tmp_path):
    """A feature that never changes over the training rows cannot be standardized: the error names
    it and the rows it was computed over, before any training."""
    from convres.experiments import jena_data, settings

    write_slice(tmp_path)   # 30 hours; only pressure and temperature vary in these rows
    s = {**settings("jena", "smoke"), "start": "2009-01-01 00:10", "train_end": "2009-01-01 20:00",
         "end": "2009-01-02 06:00", "window": 6, "horizon": 1, "stride": 6}
    with pytest.raises(DataError, match=r"\['Tpot \(K\)', 'Tdew \(degC\)'.*are constant over the "
                                        r"training rows 2009-01-01 00:10 \.\. 2009-01-01 20:00"):
        jena_data(s, data_dir=tmp_path)
