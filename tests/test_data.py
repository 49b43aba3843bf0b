"""Real-data loaders on small files in the real formats, their policies, downloads from a mirror."""

import gzip
import zipfile

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from convres import data, experiments
from convres.data import DataError
from convres.experiments import jena_data

FULL_HEADER = ",".join(f'"{c}"' for c in ("Date Time", *data.JENA_ALL_FEATURES))  # Keras: quoted
SLICE_HEADER = ",".join(("Date Time", *data.JENA_FEATURES))                      # offline slice
CSV = "jena_climate_2009_2016.csv"


def jena_rows(features=14):
    """30 hours of rows every 10 minutes from 01.01.2009 00:10, values with two decimals like the file."""
    rows = []
    for k in range(1, 30 * 6 + 1):
        day, rem = divmod(k * 10, 24 * 60)
        stamp = f"{1 + day:02d}.01.2009 {rem // 60:02d}:{rem % 60:02d}:00"
        vals = [1000.0 + k / 100, -8.0 + np.sin(k / 7), 265.4, -8.9, 93.3, 3.33, 3.11, 0.22, 1.94,
                3.12, 1307.75, 1.03, 1.75, 152.3][:features]
        rows.append(",".join([stamp, *(f"{round(v, 2):g}" for v in vals)]))
    return rows


ROWS = jena_rows(features=11)


def write_slice(folder, rows=None, header=SLICE_HEADER, name=CSV):
    (folder / "jena_climate").mkdir(parents=True, exist_ok=True)
    path = folder / "jena_climate" / name
    text = "\n".join([header, *(ROWS if rows is None else rows)])
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def keras_zip(folder, *, size=None, flag=0, method=None, members=(CSV,)):
    """A Keras-like zip of ``members``, declaring ``size`` bytes, ``flag`` bits, ``method``."""
    path = folder / "jena_climate" / f"{CSV}.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name in members:
            z.writestr(name, "\n".join([FULL_HEADER, *jena_rows()]) + "\n")
    raw = bytearray(path.read_bytes())
    for sig, off in ((b"PK\x03\x04", 0), (b"PK\x01\x02", 2)):   # local header, central directory
        at = raw.find(sig)
        raw[at + 6 + off] |= flag
        if method is not None:
            raw[at + 8 + off:at + 10 + off] = method.to_bytes(2, "little")
        if size is not None:
            raw[at + 22 + off:at + 26 + off] = size.to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    return path


def test_the_keras_zip_and_the_slice_give_the_same_rows(tmp_path):
    """The full file (a zip of 14 features, macOS metadata beside it) and the slice (11) agree."""
    full, part = tmp_path / "full", tmp_path / "part"
    keras_zip(full, members=(CSV, f"__MACOSX/._{CSV}"))
    write_slice(part)
    a, b = (data.load_jena("2009-01-01 01:00", "2009-01-02 02:00", data_dir=f, freq="1h")
            for f in (full, part))
    assert list(a.columns) == list(data.JENA_FEATURES) and a.shape == (26, 11)
    assert (a.index == b.index).all() and np.array_equal(a.to_numpy(), b.to_numpy())
    assert a.index[1] - a.index[0] == np.timedelta64(1, "h")
    df = data.read_jena(data.jena_path(full), data.JENA_ALL_FEATURES)
    assert df.shape == (180, 14) and df.dtypes.eq("float64").all()


def test_offline_copies(offline):
    df = data.load_jena("2009-01-01 01:00", "2009-01-28 17:00", data_dir=offline, freq="1h")
    assert df.shape == (665, 11)
    assert df.iloc[0]["T (degC)"] == pytest.approx(-8.05, abs=0.5)
    s = data.load_sst2("train", data_dir=offline)
    assert len(s) == 67_349 and s.label.sum() == 37_569
    if (offline / "SHA256SUMS").is_file():  # the offline copy ships one
        assert s.attrs["checksum"] == f"sha256 matches {offline / 'SHA256SUMS'}"


def cell(row, column, text):
    """The slice's rows with the value of data row ``row`` and ``column`` replaced by ``text``."""
    fields = ROWS[row].split(",")
    fields[1 + data.JENA_FEATURES.index(column)] = text
    return [*ROWS[:row], ",".join(fields), *ROWS[row + 1:]]


SENTS = ["a b c d ", "one two three four ", "too short ", "w x y z ", "e f g h ", "i j k l "]
LABELS = [0, 1, 1, 1, 0, 0]


def write_sst2(folder, sentences=SENTS, labels=LABELS, schema=None):
    (folder / "sst2").mkdir(parents=True, exist_ok=True)
    table = pa.table({"sentence": pa.array(sentences, pa.string()), "label": pa.array(labels, pa.int64()),
                      "idx": pa.array(range(len(labels)), pa.int32())})
    path = folder / "sst2" / "train.parquet"
    pq.write_table(schema(table) if schema else table, path)
    return path


LONG = ["a good fun film here ", "a bad dull film here x ", "no ", "good fun and good film ",
        "dull and bad and dull ", "bad film ", "fun good good fun film "]
DF = pd.DataFrame({"sentence": LONG, "label": [1, 0, 0, 1, 0, 0, 1]})


def written(name, content, write=lambda folder: None):
    """A data folder written by ``write``, then ``content`` at ``name`` (None: a directory); that path."""
    def write_all(folder):
        write(folder)
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            path.mkdir()
        else:
            path.write_bytes(content)
        return path
    return write_all


BAD_FILES = {   # what is wrong -> write it into a data folder (Jena's, or else SST-2's), return its path
    "the sentinel -9999": lambda f: write_slice(f, cell(40, "T (degC)", "-9999")),
    "a missing value": lambda f: write_slice(f, cell(3, "rh (%)", "")),
    "a value not a number": lambda f: write_slice(f, cell(5, "p (mbar)", "x")),
    "an infinite value": lambda f: write_slice(f, cell(7, "sh (g/kg)", "inf")),
    "a value out of range": lambda f: write_slice(f, cell(9, "rh (%)", "105.01")),
    "a repeated time": lambda f: write_slice(f, ROWS[:36] + ROWS[35:]),
    "a gap in the grid": lambda f: write_slice(f, ROWS[:35] + ROWS[36:]),
    "no rows": lambda f: write_slice(f, []),
    "a time in another format": lambda f: write_slice(f, [r.replace("01.01.2009 05", "2009-01-01 05")
                                                          for r in ROWS]),
    "a column renamed": lambda f: write_slice(f, header=SLICE_HEADER.replace("T (degC)", "Temp")),
    "too short a range": lambda f: write_slice(f, ROWS[:60]),
    "an encrypted zip": lambda f: keras_zip(f, flag=1),
    "a zip of two CSVs": lambda f: keras_zip(f, members=("a.csv", "b.csv")),
    "a zip member too large": lambda f: keras_zip(f, size=data.sources.MAX_MEMBER_BYTES + 1),
    "an unknown compression": lambda f: keras_zip(f, method=99),
    "another schema": lambda f: write_sst2(f, schema=lambda t: t.rename_columns(["text", "label", "idx"])),
    "missing values": lambda f: write_sst2(f, sentences=[*SENTS[:-1], None]),
    "a label 2": lambda f: write_sst2(f, labels=[0, 1, 2, 1, 0, 0]),
    "a sentence too long": lambda f: write_sst2(f, sentences=[*SENTS[:-1], "w " * 300]),
    "not a parquet file": written("sst2/train.parquet", b"PAR1", write_sst2),
    "a directory": written("sst2/train.parquet", None),
    "another sha256": written("SHA256SUMS", b"0" * 64 + b"  sst2/train.parquet\n", write_sst2),
    "a damaged manifest": written("SHA256SUMS", b"not a line\n", write_sst2),
    "another slice": written(f"jena_climate/{data.jena.JENA_FILES[2]}", gzip.compress(b"x")),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_file_is_a_data_error_naming_it(tmp_path, case):
    """Bad content, a cost over the policy or another sha256: a DataError names the file."""
    path = BAD_FILES[case](tmp_path)
    with pytest.raises(DataError) as err:
        if "jena_climate" in path.parts:
            jena(tmp_path, freq="1h")
        else:
            data.load_sst2("train", data_dir=tmp_path)
    assert str(path) in str(err.value), err.value


def test_sst2_roundtrip_and_prefixes(tmp_path):
    """The Hub's file read as written, checked once its sha256 is recorded; the n-token prefixes in file
    order, or balanced."""
    path = write_sst2(tmp_path)
    assert data.load_sst2(data_dir=tmp_path).attrs["checksum"].startswith("not verified")
    (tmp_path / "SHA256SUMS").write_text(f"{data.sha256_file(path)}  ./sst2/train.parquet\n")
    df = data.load_sst2("train", data_dir=tmp_path)
    assert df.attrs["checksum"].startswith("sha256 matches")
    assert list(df.columns) == ["sentence", "label", "idx"] and len(df) == 6 and df.sentence[0] == "a b c d "
    tokens, labels, _ = data.sst2_prefixes(df, np.int64(4), np.int64(4))     # numpy integers are integers
    assert tokens == [["a", "b", "c", "d"], ["one", "two", "three", "four"], ["w", "x", "y", "z"],
                      ["e", "f", "g", "h"]] and labels.tolist() == [0, 1, 1, 0]
    tokens, labels, rows = data.sst2_prefixes(DF, 5)
    assert rows.tolist() == [0, 1, 3, 4, 6] and labels.tolist() == [1, 0, 1, 0, 1]
    assert tokens[1] == ["a", "bad", "dull", "film", "here"] and all(len(t) == 5 for t in tokens)
    tokens, labels, rows = data.sst2_prefixes(DF, 5, size=4)
    assert rows.tolist() == [0, 1, 3, 4] and labels.tolist() == [1, 0, 1, 0]


def test_ppmi_embeddings_are_deterministic_and_follow_cooccurrence():
    sents = [s.split() for s in LONG] * 3
    vocab, E = data.ppmi_embeddings(sents, 3, vocab_size=8)
    assert np.array_equal(E, data.ppmi_embeddings(sents, 3, vocab_size=8)[1])   # deterministic
    assert E.shape == (8, 3) and len(vocab) == 8
    counts = {t: sum(s.count(t) for s in sents) for t in vocab}
    assert vocab == sorted(counts, key=lambda t: (-counts[t], t))   # most frequent first, ties alphabetical
    assert (E[np.abs(E).argmax(0), range(3)] > 0).all()    # the largest entry of each column is positive
    vocab, E = data.ppmi_embeddings(sents, 8, vocab_size=8, iterations=20)
    unit = E / np.linalg.norm(E, axis=1, keepdims=True)
    i = {t: k for k, t in enumerate(vocab)}
    assert unit[i["good"]] @ unit[i["fun"]] > unit[i["good"]] @ unit[i["dull"]]


VOCAB, VECTORS = ["a", "b", "c"], np.array([[1.0, 10.0], [3.0, 30.0], [5.0, 20.0]])


def test_embed_with_standardizes_over_the_given_tokens_and_zeroes_unknown_ones():
    X, (mean, std), oov = data.embed_with([["a", "b"], ["c", "a"]], VOCAB, VECTORS)
    seen = VECTORS[[0, 1, 2, 0]]
    assert np.allclose(mean, seen.mean(0)) and np.allclose(std, seen.std(0)) and oov == 0
    flat = X.reshape(-1, 2).numpy()
    assert np.allclose(flat.mean(0), 0) and np.allclose(flat.std(0), 1)
    Xv, _, oov_v = data.embed_with([["a", "zzz"]], VOCAB, VECTORS, mean=mean, std=std)
    assert oov_v == 0.5 and torch.equal(Xv[0, 1], torch.zeros(2, dtype=torch.float64))
    assert torch.allclose(Xv[0, 0], X[0, 0])                # the training statistics are reused


JENA_TASK = dict(start="2009-01-01 00:10", train_end="2009-01-01 20:00", end="2009-01-02 06:00", window=6,
                 horizon=1, stride=6)   # only pressure and temperature vary in the rows of jena_rows


def jena(f, start="2009-01-01 01:00", end="2009-01-01 20:00", **kwargs):
    return data.load_jena(start, end, data_dir=f, **kwargs)


BAD_ARGUMENTS = {   # what is wrong -> (the call, on a data folder holding write_slice's file; a name it says)
    "a freq not a duration": (lambda f: jena(f, freq="bogus"), "freq"),
    "a freq off the rows": (lambda f: jena(f, freq="7min"), "freq"),
    "a start not a date": (lambda f: jena(f, start="not a date"), "start"),
    "a start with a zone": (lambda f: jena(f, start="2009-01-01 01:00+01:00"), "start"),
    "an end before the start": (lambda f: jena(f, start="2009-01-02 00:00", end="2009-01-01 00:00"), "end"),
    "features constant over the training rows": (
        lambda f: jena_data({**experiments.settings("jena", "smoke"), **JENA_TASK}, data_dir=f),
        "constant over the training rows 2009-01-01 00:10 .. 2009-01-01 20:00"),
    "a bad split": (lambda f: data.sst2_path("dev"), "split"),
    "an odd size": (lambda f: data.sst2_prefixes(DF, 4, 3), "size"),
    "too few of a label": (lambda f: data.sst2_prefixes(DF, 5, size=6), "label 0"),
    "more dimensions than words": (lambda f: data.ppmi_embeddings([s.split() for s in LONG], 50), "d = 50"),
    "sentences of two lengths": (lambda f: data.embed_with([["a"], ["a", "b"]], VOCAB, VECTORS),
                                 "sentences"),
    "a zero std": (lambda f: data.embed_with([["a"]], VOCAB, VECTORS, mean=[0, 0], std=[1, 0]),
                   "standard deviation"),
    "fewer vectors than words": (lambda f: data.embed_with([["a"]], VOCAB, VECTORS[:2]), "vectors"),
    "no smoothing": (lambda f: data.ppmi_embeddings([s.split() for s in LONG], 2, smoothing=0), "smoothing"),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_a_bad_argument_is_a_clear_error_naming_it(case, clear_error, tmp_path):
    call, name = BAD_ARGUMENTS[case]
    write_slice(tmp_path)
    clear_error(lambda: call(tmp_path), name)


def test_no_data_says_how_to_get_it(tmp_path):
    for load in (data.load_jena, data.load_sst2):
        with pytest.raises(FileNotFoundError, match="python -m convres data.*CONVRES_DATA_DIR"):
            load(data_dir=tmp_path)


# --- checksums and downloads (from the mirror of tests/conftest.py) --------------------------------

def test_a_fresh_data_folder_is_filled_from_the_mirror_resuming_a_part_file(tmp_path, mirror):
    base, files, server = mirror
    hub = data.sources._hub("train").removeprefix(base)
    train = files[hub]
    (tmp_path / "sst2").mkdir()
    (tmp_path / "sst2" / "train.parquet.part").write_bytes(train[:1000])
    zipped = data.download("jena", data_dir=tmp_path)
    data.download("sst2", data_dir=tmp_path)
    assert zipped.read_bytes() == files["/jena.zip"] and {p for p, _ in server.requests} == set(files)
    assert (tmp_path / "sst2" / "train.parquet").read_bytes() == train
    assert (hub, "bytes=1000-") in server.requests   # the part file resumed
    assert set(data.sources.read_checksums(tmp_path)) == set(data.sources.SOURCES)
    assert data.load_sst2(data_dir=tmp_path).attrs["checksum"].startswith("sha256 matches")
    assert jena(tmp_path, end="2009-01-28 17:00", freq="1h").shape == (665, 11)


@pytest.mark.parametrize("where", ["missing", "refused", "not a zip", "offline"])
def test_a_failed_download_names_the_source_and_the_offline_fix(tmp_path, mirror, monkeypatch, where):
    base, files, _ = mirror
    if where == "missing":
        files.pop("/jena.zip")
    elif where == "refused":
        monkeypatch.setenv("CONVRES_JENA_URL", "http://127.0.0.1:9/jena.zip")
    elif where == "not a zip":
        files["/jena.zip"] = b"<html>captive portal</html>"
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="CONVRES_DATA_DIR"):
        data.download("sst2" if where == "offline" else "jena", data_dir=tmp_path)
    assert not any(p.suffix in (".zip", ".parquet") for p in tmp_path.rglob("*"))


def test_a_wrong_zip_keeps_its_part_name_and_says_so(tmp_path, mirror):
    """A downloaded zip without one CSV takes no final name (its sha256 is not recorded)."""
    _, files, _ = mirror
    with zipfile.ZipFile(tmp_path / "two.zip", "w") as z:
        z.writestr("a.csv", "x\n1\n")
        z.writestr("b.csv", "x\n2\n")
    files["/jena.zip"] = (tmp_path / "two.zip").read_bytes()
    with pytest.raises(DataError, match="holds 2 CSV file.*delete it"):
        data.download("jena", data_dir=tmp_path / "data")
    assert [p.name for p in (tmp_path / "data").rglob("*.zip*")] == ["jena_climate_2009_2016.csv.zip.part"]
