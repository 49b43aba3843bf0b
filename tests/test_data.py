"""Real-data loaders on small files written here in the real formats (Jena CSV / Keras zip, SST-2 parquet)."""

import gzip
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from convres import data
from convres.data import DataError

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


def test_download_uses_the_loaders_and_keeps_present_files(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(data, "_atomic_download", lambda url, dest: calls.append((url, dest)) or dest)
    dest = data.download("jena", data_dir=tmp_path)
    assert calls == [(data.JENA_URL, tmp_path / "jena_climate" / "jena_climate_2009_2016.csv.zip")]
    assert dest == calls[0][1]
    (tmp_path / "sst2").mkdir()
    (tmp_path / "sst2" / "train.parquet").write_bytes(b"present")
    assert data.download("sst2", data_dir=tmp_path) == tmp_path / "sst2" / "train.parquet"  # no Hub call


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
    tokens, labels = data.sst2_subset(df, 4, 4)
    assert tokens == [["a", "b", "c", "d"], ["one", "two", "three", "four"], ["w", "x", "y", "z"],
                      ["e", "f", "g", "h"]]
    assert labels.tolist() == [0, 1, 1, 0]
    with pytest.raises(DataError, match="only 2 sentences with label 1"):
        data.sst2_subset(df, 6, 4)
    with pytest.raises(ValueError, match="even integer"):
        data.sst2_subset(df, 3, 4)


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


def test_sst2_checksum_mismatch(tmp_path):
    path = write_sst2(tmp_path, SENTS, LABELS)
    path.write_bytes(path.read_bytes().ljust(2_970_520, b"\0"))  # the size of the real train file
    with pytest.raises(DataError, match="checksum mismatch"):
        data.load_sst2("train", data_dir=tmp_path)


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


def test_embedding_arguments_are_checked():
    with pytest.raises(ValueError, match="d \\(the embedding dimension\\)"):
        data.hash_embedding("film", 0)
    with pytest.raises(TypeError, match="token must be a str"):
        data.hash_embedding(3, 4)
    with pytest.raises(ValueError, match="non-empty"):
        data.embed_tokens([], 4)
