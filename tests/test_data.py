"""Real-data loaders on small files in the real formats, their policies, downloads from a mirror."""

import gzip
import zipfile

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from convres import data, experiments
from convres.data import DataError
from convres.experiments import jena_data

FULL_HEADER = ",".join(f'"{c}"' for c in ("Date Time", *data.JENA_ALL_FEATURES))  # Keras: quoted
SLICE_HEADER = ",".join(("Date Time", *data.JENA_FEATURES))                      # offline slice
CSV = "jena_climate_2009_2016.csv"


def jena_rows(hours=30, features=14, trailing_zeros=True):
    """Rows every 10 minutes from 01.01.2009 00:10, values printed like the Keras file."""
    rows = []
    for k in range(1, hours * 6 + 1):
        day, rem = divmod(k * 10, 24 * 60)
        stamp = f"{1 + day:02d}.01.2009 {rem // 60:02d}:{rem % 60:02d}:00"
        vals = [1000.0 + k / 100, -8.0 + np.sin(k / 7), 265.4, -8.9, 93.3, 3.33, 3.11, 0.22, 1.94,
                3.12, 1307.75, 1.03, 1.75, 152.3][:features]
        fmt = "{:.2f}" if trailing_zeros else "{:g}"
        rows.append(",".join([stamp, *(fmt.format(round(v, 2)) for v in vals)]))  # two decimals, as the file
    return rows


def write_slice(folder, rows=None, header=SLICE_HEADER, name=CSV):
    (folder / "jena_climate").mkdir(parents=True, exist_ok=True)
    path = folder / "jena_climate" / name
    text = "\n".join([header, *(rows or jena_rows(features=11, trailing_zeros=False))])
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


def slice_rows(row, column, text):
    """The slice's rows with the cell of data row ``row`` and ``column`` replaced by ``text``."""
    rows = jena_rows(features=11, trailing_zeros=False)
    fields = rows[row].split(",")
    fields[1 + data.JENA_FEATURES.index(column)] = text
    rows[row] = ",".join(fields)
    return rows


BAD_VALUES = ["", "x", "inf", "-Infinity", "-9999", "-9999.00", "1e308", "nan"]


@settings(max_examples=80)
@given(row=st.integers(0, 179), column=st.sampled_from(data.JENA_FEATURES),
       text=st.one_of(st.sampled_from(BAD_VALUES), st.floats(-2e4, 2e4).map(lambda v: f"{v:.2f}")))
def test_a_value_is_read_only_if_it_passes_every_content_check(row, column, text, tmp_path_factory):
    """A value missing, not a number, infinite, the sentinel or out of range is named; else read."""
    path = write_slice(tmp_path_factory.mktemp("jena"), rows=slice_rows(row, column, text))
    lo, hi = data.JENA_BOUNDS[column]
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if lo <= value <= hi:
        assert data.read_jena(path)[column].iloc[row] == value
        return
    with pytest.raises(DataError, match=f"{path}.*{column[:2]}"):
        data.read_jena(path)


def _edited(edit, rows, header):
    if edit == "duplicate":
        rows.insert(36, rows[35])
    elif edit == "gap":
        del rows[35]
    elif edit == "bad time":
        rows[29] = rows[29].replace("01.01.2009 05:00:00", "2009-01-01 05:00:00")
    elif edit == "a column renamed":
        header = header.replace("T (degC)", "Temp")
    return rows, header


@pytest.mark.parametrize("edit,end,names", [
    ("duplicate", None, ()), ("gap", None, ()), ("header only", None, ()), ("bad time", None, ()),
    ("a column renamed", None, ("T (degC)",)),
    ("", "2009-02-01 00:00", ("2009-01-01 00:10:00 .. 2009-01-02 06:00:00",)),   # a range the file lacks
])
def test_rows_that_break_the_time_order_or_the_file_shape_are_named(tmp_path, edit, end, names):
    """A file not of evenly spaced Jena rows, or lacking the range asked for, is named."""
    path = write_slice(tmp_path, *_edited(edit, jena_rows(features=11, trailing_zeros=False), SLICE_HEADER))
    if edit == "header only":
        path.write_text(SLICE_HEADER + "\n")
    with pytest.raises(DataError, match=str(path)) as err:
        data.load_jena("2009-01-01 01:00", end or "2009-01-01 20:00", data_dir=tmp_path, freq="1h")
    assert all(n in str(err.value) for n in names), err.value


@pytest.mark.parametrize("kwargs", [dict(freq="bogus"), dict(freq="7min"), dict(start="not a date"),
                                    dict(start="2009-01-01 01:00+01:00"),
                                    dict(start="2009-01-02 00:00", end="2009-01-01 00:00")])
def test_window_arguments_are_checked(tmp_path, kwargs, clear_error):
    write_slice(tmp_path)
    args = {"start": "2009-01-01 01:00", "end": "2009-01-01 20:00", **kwargs}
    clear_error(lambda: data.load_jena(args.pop("start"), args.pop("end"), data_dir=tmp_path, **args),
                *kwargs)
    good = data.load_jena("2009-01-01 01:00", "2009-01-01 20:00", data_dir=tmp_path, freq="1h")
    assert good.shape == (20, 11)


# --- standardize, SST-2 prefixes, PPMI word vectors ----------------------------------------------

def test_standardize_gives_columns_of_mean_0_and_std_1():
    rng = np.random.default_rng(0)
    z = data.standardize(rng.normal(size=(50, 3)) * [1, 10, 100] + [0, 5, 1000], ["a", "b", "c"])
    assert np.allclose(z.mean(0), 0) and np.allclose(z.std(0), 1)


def test_jena_task_names_constant_features_of_the_training_rows(tmp_path):
    """A feature constant over the training rows is named with those rows, before training."""
    write_slice(tmp_path)   # 30 hours; only pressure and temperature vary in these rows
    s = {**experiments.settings("jena", "smoke"), "start": "2009-01-01 00:10",
         "train_end": "2009-01-01 20:00", "end": "2009-01-02 06:00", "window": 6, "horizon": 1, "stride": 6}
    with pytest.raises(DataError, match=r"\['Tpot \(K\)', 'Tdew \(degC\)'.*"
                                        r"2009-01-01 00:10 \.\. 2009-01-01 20:00"):
        jena_data(s, data_dir=tmp_path)


def write_sst2(folder, sentences, labels, split="train", schema=None):
    (folder / "sst2").mkdir(parents=True, exist_ok=True)
    table = pa.table({"sentence": pa.array(sentences, pa.string()), "label": pa.array(labels, pa.int64()),
                      "idx": pa.array(range(len(labels)), pa.int32())})
    path = folder / "sst2" / f"{split}.parquet"
    pq.write_table(schema(table) if schema else table, path)
    return path


SENTS = ["a b c d ", "one two three four ", "too short ", "w x y z ", "e f g h ", "i j k l "]
LABELS = [0, 1, 1, 1, 0, 0]
LONG = ["a good fun film here ", "a bad dull film here x ", "no ", "good fun and good film ",
        "dull and bad and dull ", "bad film ", "fun good good fun film "]
DF = pd.DataFrame({"sentence": LONG, "label": [1, 0, 0, 1, 0, 0, 1]})


def test_sst2_roundtrip_and_prefixes(tmp_path):
    """The Hub's file read as written; the n-token prefixes in file order, or balanced."""
    write_sst2(tmp_path, SENTS, LABELS)
    df = data.load_sst2("train", data_dir=tmp_path)
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
    vocab2, E2 = data.ppmi_embeddings(sents, 3, vocab_size=8)
    assert vocab == vocab2 and np.array_equal(E, E2)
    assert E.shape == (8, 3) and len(vocab) == 8
    counts = {t: sum(s.count(t) for s in sents) for t in vocab}
    assert vocab == sorted(counts, key=lambda t: (-counts[t], t))   # most frequent first, ties alphabetical
    assert (E[np.abs(E).argmax(0), range(3)] > 0).all()    # the largest entry of each column is positive
    vocab, E = data.ppmi_embeddings(sents, 8, vocab_size=8, iterations=20)
    unit = E / np.linalg.norm(E, axis=1, keepdims=True)
    i = {t: k for k, t in enumerate(vocab)}
    assert unit[i["good"]] @ unit[i["fun"]] > unit[i["good"]] @ unit[i["dull"]]


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


VOCAB, VECTORS = ["a", "b", "c"], np.array([[1.0, 10.0], [3.0, 30.0], [5.0, 20.0]])
CONSTANT = np.column_stack([np.arange(5.0), np.full(5, 1307.75), np.arange(5.0)])
BAD_ARGUMENTS = {   # what is wrong -> (the call, a name its error must say)
    "a constant feature": (lambda: data.standardize(CONSTANT, ["p", "rho", "T"]), "'rho'"),
    "too few names": (lambda: data.standardize(CONSTANT, ["T"]), "names"),
    "a bad split": (lambda: data.sst2_path("dev"), "split"),
    "an odd size": (lambda: data.sst2_prefixes(DF, 4, 3), "size"),
    "too few of a label": (lambda: data.sst2_prefixes(DF, 5, size=6), "label 0"),
    "more dimensions than words": (lambda: data.ppmi_embeddings([s.split() for s in LONG], 50), "d = 50"),
    "sentences of two lengths": (lambda: data.embed_with([["a"], ["a", "b"]], VOCAB, VECTORS), "sentences"),
    "a zero std": (lambda: data.embed_with([["a"]], VOCAB, VECTORS, mean=np.zeros(2), std=np.array([1, 0.0])),
                   "standard deviation"),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_a_bad_argument_is_a_clear_error_naming_it(case, clear_error):
    clear_error(*BAD_ARGUMENTS[case])


@pytest.mark.parametrize("edit,name", [
    (dict(schema=lambda t: t.rename_columns(["text", "label", "idx"])), "'sentence'"),
    (dict(sentences=[*SENTS[:-1], None]), "missing values"),
    (dict(labels=[0, 1, 2, 1, 0, 0]), "label"),
])
def test_an_sst2_file_of_another_schema_or_content_is_named(tmp_path, edit, name):
    path = write_sst2(tmp_path, **(dict(sentences=SENTS, labels=LABELS) | edit))
    with pytest.raises(DataError, match=str(path)) as err:
        data.load_sst2("train", data_dir=tmp_path)
    assert name in str(err.value)


def test_no_data_says_how_to_get_it(tmp_path):
    for load in (data.load_jena, data.load_sst2):
        with pytest.raises(FileNotFoundError, match="python -m convres data.*CONVRES_DATA_DIR"):
            load(data_dir=tmp_path)
    (tmp_path / "sst2" / "train.parquet").mkdir(parents=True)
    with pytest.raises(DataError, match="train.parquet"):
        data.load_sst2(data_dir=tmp_path)


# --- the cost policy: a zip member's declared size, a parquet's text, checked before reading -------

@settings(max_examples=60)
@given(size=st.sampled_from([None, 2**20, data.sources.MAX_MEMBER_BYTES + 1, 2**32 - 1]),
       flag=st.sampled_from([0, 1]), method=st.sampled_from([None, 0, 1, 6, 9, 12, 14, 98, 99]),
       members=st.sampled_from([(CSV,), ("a.csv", "b.csv"), ("notes.txt",)]))
def test_a_zip_member_is_checked_against_the_cost_policy_before_it_is_read(size, flag, method, members,
                                                                           tmp_path_factory):
    """A zip member refused by the cost policy is a clear error before a byte is inflated."""
    path = keras_zip(tmp_path_factory.mktemp("zip"), size=size, flag=flag, method=method, members=members)
    refused = flag or method not in (None, 8) or len(members) != 1 or not members[0].endswith(".csv") \
        or (size or 0) > data.sources.MAX_MEMBER_BYTES
    try:
        df = data.read_jena(path)
    except DataError as err:
        assert str(path) in str(err)
        return
    assert not refused and df.shape == (180, 11)


@settings(max_examples=40)
@given(lengths=st.lists(st.integers(1, 400), min_size=1, max_size=6), max_tokens=st.sampled_from([8, 64, 256]),
       repeat=st.integers(1, 3))
def test_a_parquet_is_read_only_within_the_cost_policy(lengths, max_tokens, repeat, tmp_path_factory):
    """A sentence longer than ``max_tokens`` is an error naming the file."""
    folder = tmp_path_factory.mktemp("sst2")
    sentences = [" ".join(["w"] * n) for n in lengths] * repeat
    write_sst2(folder, sentences, [i % 2 for i in range(len(sentences))])
    try:
        df = data.load_sst2("train", data_dir=folder, max_tokens=max_tokens)
    except DataError as err:
        assert "train.parquet" in str(err) and max(lengths) > max_tokens
        return
    assert max(lengths) <= max_tokens and len(df) == len(sentences)


# --- checksums and downloads (from the mirror of tests/conftest.py) --------------------------------

def test_a_file_is_checked_against_its_recorded_sha256(tmp_path):
    path = write_sst2(tmp_path, SENTS, LABELS)
    assert data.load_sst2(data_dir=tmp_path).attrs["checksum"].startswith("not verified")
    (tmp_path / "SHA256SUMS").write_text(f"{data.sha256_file(path)}  ./sst2/train.parquet\n")
    assert data.load_sst2(data_dir=tmp_path).attrs["checksum"].startswith("sha256 matches")
    for manifest in [f"{'0' * 64}  sst2/train.parquet\n", "not a line\n"]:
        (tmp_path / "SHA256SUMS").write_text(manifest)
        with pytest.raises(DataError, match="SHA256SUMS|sha256"):
            data.load_sst2(data_dir=tmp_path)
    sliced = write_slice(tmp_path, name=data.jena.JENA_FILES[2])
    sliced.write_bytes(gzip.compress(b"x"))
    (tmp_path / "SHA256SUMS").unlink()
    with pytest.raises(DataError, match="sha256"):
        data.load_jena(data_dir=tmp_path)


def test_a_fresh_data_folder_is_filled_from_the_mirror(tmp_path, mirror):
    base, files, server = mirror
    jena = data.download("jena", data_dir=tmp_path)
    data.download("sst2", data_dir=tmp_path)
    assert jena.read_bytes() == files["/jena.zip"] and {p for p, _ in server.requests} == set(files)
    sums = data.sources.read_checksums(tmp_path)
    assert set(sums) == set(data.sources.SOURCES)
    assert data.load_sst2(data_dir=tmp_path).attrs["checksum"].startswith("sha256")
    assert data.load_jena("2009-01-01 01:00", "2009-01-28 17:00", data_dir=tmp_path, freq="1h").shape == (665, 11)


def test_a_download_resumes_its_part_file(tmp_path, mirror):
    base, files, server = mirror
    body = files["/datasets/nyu-mll/glue/resolve/" + data.sources.SST2_REVISION + "/sst2/train-00000-of-00001.parquet"]
    part = tmp_path / "sst2" / "train.parquet.part"
    part.parent.mkdir()
    part.write_bytes(body[:1000])
    data.sst2_path("train", data_dir=tmp_path, download=True)
    assert (tmp_path / "sst2" / "train.parquet").read_bytes() == body and not part.exists()
    assert server.requests[-1][1] == "bytes=1000-"


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
