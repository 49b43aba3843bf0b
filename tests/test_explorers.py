"""The explorers of the static site (convres.explorers): their data against convres itself, their page
element, their static frame and their live (kernel) version. The browser plays them in test_site.py."""

import base64
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import convres
from convres import explorers as ex
from convres import vega
from convres.collapse import attention_output, collapse_measures, gaussian_instance, rank_one_floor
from convres.gd import BLOWUP
from convres.lemmas import rate_alpha

PNG = b"\x89PNG\r\n\x1a\n"
ROOT = Path(__file__).resolve().parents[1]

# Small grids: the same code paths as the book's, in about a second.
RC = {"betas": [0.0, 0.3, 1.0], "d_qks": [4, 64], "ns": [2, 5], "gd": {"steps": 6, "record_every": 2}}
RC_START = {"beta": 1.0, "d_qk": 64, "n": 5}
CV = {"betas": [0.0, 1.0], "mus": [0.002, 0.3], "d_qks": [4, 16], "steps": 12, "record_every": 4}
CV_START = {"beta": 1.0, "mu": 0.002, "d_qk": 16}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVRES_CACHE_DIR", str(tmp_path / "cache"))


def embedded(explorer) -> dict:
    """The data an explorer's page element carries (what web/explorer.js reads)."""
    html = explorer.html()
    raw = re.search(r'<script type="application/json" class="cx-data">(.*?)</script>', html, re.S).group(1)
    return json.loads(raw.replace("<\\/", "</"))


def close(a, b, rtol=1e-4):
    """Equal up to the 5 significant digits a page embeds."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return a.shape == b.shape and np.allclose(a, b, rtol=rtol, atol=0)


def test_rank_collapse_positions_are_what_convres_computes():
    data = embedded(ex.rank_collapse_explorer(RC, start=RC_START))
    g = {**ex.RANK_COLLAPSE_GRID, **RC, "gd": {**ex.RANK_COLLAPSE_GRID["gd"], **RC["gd"]}}
    assert len(data["positions"]) == 3 * 2 * 2 and data["start"] == "2,1,1"
    for key in ("2,1,1", "0,0,0", "1,1,0"):
        i, j, k = map(int, key.split(","))
        beta, d_qk, n = g["betas"][i], g["d_qks"][j], g["ns"][k]
        rec = data["positions"][key]
        # the spectra, straight from the collapse primitives
        inst = gaussian_instance(n, g["d"], d_qk, g["seed"])
        _, A, Z = attention_output(inst["X"], inst["W_Q"], inst["W_K"], inst["W_V"], 1.0 / d_qk, beta)
        assert close(rec["sv_X"], torch.linalg.svdvals(inst["X"]))
        assert close(rec["sv_attn"], torch.linalg.svdvals(A)) and close(rec["sv_Z"], torch.linalg.svdvals(Z))
        measures = collapse_measures(A)
        assert np.isclose(rec["readout"][0][1], measures["sigma_min"], rtol=1e-4)
        assert np.isclose(rec["readout"][0][3], measures["effective_rank"], rtol=1e-4)
        # the runs, with convres.gradient_descent directly
        s = g["gd"]   # the chapter's instance: data from seed, weights from seed + 1, scale 1/d_QK
        cfg = convres.ModelConfig(d=s["d"], d_qk=d_qk, m=s["m"], c=1, beta=1.0, scale="1/d_qk")
        X, Y = convres.synthetic_regression(s["N"], n, s["d"], 1, seed=s["seed"])
        params = convres.init_params(cfg, seed=s["seed"] + 1)
        for field, b in (("loss0", 0.0), ("loss", beta)):
            _, h = convres.gradient_descent(params, X, Y, cfg.replace(beta=b), s["mu"], s["steps"],
                                            record_every=s["record_every"])
            assert close(rec[field], h.loss), (key, field)
        assert np.isclose(rec["floor"], rank_one_floor(Y), rtol=1e-4)


def test_convergence_positions_are_what_convres_computes():
    data = embedded(ex.convergence_explorer(CV, start=CV_START))
    g = {**ex.CONVERGENCE_GRID, **CV}
    assert len(data["positions"]) == 2 * 2 * 2
    statuses = set()
    for key, rec in data["positions"].items():
        i, j, k = map(int, key.split(","))
        beta, mu, d_qk = g["betas"][i], g["mus"][j], g["d_qks"][k]
        cfg = convres.ModelConfig(d=g["d"], d_qk=d_qk, m=g["m"], c=1, beta=beta,
                                  activation=g["activation"], scale="1/d_qk")
        X, Y = convres.synthetic_regression(g["N"], g["n"], g["d"], 1, seed=g["seed"])
        params = convres.init_params(cfg, seed=g["init_seed"])
        _, h = convres.gradient_descent(params, X, Y, cfg, mu, g["steps"], record_every=g["record_every"],
                                        tol=g["tol"], blowup=BLOWUP)
        assert close(rec["loss"], h.loss) and close(rec["smin_Z"], h.sigma_min_Z)
        assert close(rec["smin_H"], h.sigma_min_H) and rec["status"] == h.status
        alpha = rate_alpha(params, X, cfg)
        assert np.isclose(rec["alpha"], alpha, rtol=1e-4)
        t = np.arange(0, g["steps"] + 1, g["record_every"])
        assert close(rec["envelope"], h.loss[0] * (1 - mu * alpha) ** t)
        statuses.add(h.status)
    assert "diverged" in statuses and statuses - {"diverged"}   # mu = 0.3 diverges, 0.002 does not


def test_page_element_mime_bundle_and_static_frame():
    explorer = ex.rank_collapse_explorer(RC, start=RC_START)
    bundle = explorer._repr_mimebundle_()
    assert set(bundle) == {"text/html", "image/png", "text/plain"}
    html = bundle["text/html"]
    assert 'class="convres-explorer' in html and html.count("<script") == 1
    assert "<input" not in html            # no control exists before the page's script builds it
    png = base64.b64decode(bundle["image/png"])
    assert png.startswith(PNG)
    width, height = struct.unpack(">II", png[16:24])
    assert width == 2 * vega.DISPLAY_WIDTH_PX and height > width / 2     # 2x, two stacked panels
    assert f"{explorer.data_bytes() / 1000:.0f} kB of data" in html
    assert "= 12 positions" in explorer.note   # computed from the grid, not typed


def test_data_cannot_end_the_script_element(monkeypatch):
    explorer = ex.rank_collapse_explorer(RC, start=RC_START)
    explorer.positions[explorer.start_key]["readout"][0][0] = "</script><b>"
    assert "</script><b>" not in explorer.html() and embedded(explorer)["positions"]


def test_explorer_checks(monkeypatch):
    with pytest.raises(ValueError, match="not one of the grid values"):
        ex.rank_collapse_explorer(RC, start={"beta": 0.5})
    with pytest.raises(ValueError, match="unknown grid settings"):
        ex.rank_collapse_data({"bogus": 1})
    with pytest.raises(ValueError, match="must contain 0"):
        ex.rank_collapse_data({**RC, "betas": [0.3, 1.0]})
    with pytest.raises(ValueError, match="distinct"):
        ex.convergence_data({**CV, "mus": [0.1, 0.1]})
    monkeypatch.setattr(vega, "MAX_DATA_BYTES", 1000)
    with pytest.raises(ValueError, match="MAX_DATA_BYTES"):
        ex.rank_collapse_explorer(RC, start=RC_START)


def test_record_lookup_and_cache():
    explorer = ex.convergence_explorer(CV, start=CV_START)
    assert explorer.record(beta=0.0, mu=0.3, d_qk=4) is explorer.positions["0,1,0"]
    with pytest.raises(ValueError, match="not a grid value"):
        explorer.record(beta=0.5, mu=0.3, d_qk=4)
    again = ex.convergence_data(CV)   # from the cache, the same numbers
    assert again["positions"]["0,1,0"]["loss"] == explorer.positions["0,1,0"]["loss"]


def test_series_rows_and_floor():
    rec = {"a": [3.0, 0.0, 1e-9], "steps": [0, 5, 10], "c": 2.0}
    rows = vega.series_rows({"key": "A", "y": "a", "x": "steps", "every": 2}, rec, floor=1e-6)
    assert [r["y"] for r in rows] == [3.0, 1e-6, 1e-6] and [r["m"] for r in rows] == [True, False, True]
    assert [r["x"] for r in vega.series_rows({"key": "A", "y": "a", "x": "index1"}, rec)] == [1, 2, 3]
    const = vega.series_rows({"key": "C", "y": "c", "x": None, "const_x": [0, 60]}, rec)
    assert [(r["x"], r["y"]) for r in const] == [(0, 2.0), (60, 2.0)]
    assert vega.series_rows({"key": "B", "y": "missing", "x": "index0"}, rec) == []


@pytest.mark.parametrize("x, text", [(5.249e-4, "5.25 × 10⁻⁴"), (1.41, "1.41"), (0.0479, "0.0479"),
                                     (14.65, "14.7"), (999.6, "1.00 × 10³"), (0.01, "0.0100"),
                                     (0.00999, "9.99 × 10⁻³"), (1.125, "1.13"), (0, "0"),
                                     (-2.5e7, "-2.50 × 10⁷")])
def test_format_number(x, text):
    assert vega.format_number(x) == text


def test_readout_text():
    assert vega.readout_text([["σ<sub>min</sub> = ", 5.249e-4, " after ", [60, "int"], " steps"]]) == \
        ["σmin = 5.25 × 10⁻⁴ after 60 steps"]


def test_javascript_formats_numbers_like_python():
    """web/explorer.js writes the readout; its number format must be format_number's, to the character."""
    node = shutil.which("node") or (str(Path(convres.__file__).parents[1] / ".venv" / "bin" / "node"))
    if not Path(node).exists():
        pytest.skip("no node to run web/explorer.js's formatter")
    js = (ROOT / "web" / "explorer.js").read_text()
    fmt = js[js.index("  var SUP"):js.index("  function loadScript")]
    rng = np.random.default_rng(0)
    xs = [float(v) for v in 10 ** rng.uniform(-22, 9, 400)] + [k / 8 for k in range(1, 8001, 37)]
    xs += [1.125, 2.375, 0.0625, 999.5, 9995.0, 0.0099951, 1e-20, 1e6]
    script = fmt + f"\nconsole.log(JSON.stringify({json.dumps(xs)}.map(x => fmt(x))));\n"
    out = json.loads(subprocess.run([node, "-e", script], capture_output=True, text=True, check=True).stdout)
    assert out == [vega.format_number(x) for x in xs]


def test_grid_matches_the_simulations_chapter():
    """The convergence explorer runs on the instance of the chapter Simulations."""
    from convres.experiments import EXPERIMENTS
    exp = EXPERIMENTS["simulations"]
    profiles = getattr(exp, "profiles", exp)
    chapter = profiles.get("book", profiles.get("smoke"))   # the profile the chapter shows
    for key in ("N", "n", "d", "m", "activation"):
        assert ex.CONVERGENCE_GRID[key] == chapter[key], key


def test_static_frames():
    rc = ex.rank_collapse_explorer(RC, start=RC_START)
    fig = rc.figure(rc.positions[rc.start_key], rc.start_values)
    assert len(fig.axes) == 2 and fig.axes[1].get_position().y1 < fig.axes[0].get_position().y0
    assert all(line.get_marker() not in (None, "None", "") for line in fig.axes[0].lines)  # markers too
    cv = ex.convergence_explorer(CV, start=CV_START)
    fig = cv.figure(cv.positions[cv.start_key], cv.start_values)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("envelope" in t for t in labels)


def test_live_versions_compute_off_the_grid():
    ipywidgets = pytest.importorskip("ipywidgets")
    box = ex.rank_collapse_live(beta=0.7, d_qk=8, n=3, grid={"gd": {"steps": 3, "record_every": 1}})
    s_beta, s_dqk, s_n, readout, image = box.children
    first = bytes(image.value)
    assert first.startswith(PNG) and "σmin(Attn(X))" in readout.value
    s_n.value = 4
    assert bytes(image.value) != first
    with pytest.raises(ValueError, match="d_qk"):
        ex.rank_collapse_live(d_qk=3)
    box = ex.convergence_live(beta=0.4, mu=0.003, d_qk=8, grid={"steps": 4, "record_every": 2})
    s_beta, s_mu, s_dqk, readout, image = box.children
    first = readout.value
    s_mu.value = 0.01
    assert readout.value != first and isinstance(box, ipywidgets.VBox)
    with pytest.raises(ValueError, match="mu"):
        ex.convergence_live(mu=1.0)


@pytest.mark.parametrize("x, text", [(None, "div"), (0.996, "1.0"), (0.272, "0.27"), (0.0125, "0.013"),
                                     (0.00099, "1·10⁻³"), (3.2e-5, "3·10⁻⁵"), (9.7e-5, "1·10⁻⁴"),
                                     (12.3, "12"), (1.0, "1.0")])
def test_cell_text(x, text):
    assert vega.cell_text(x) == text


def test_presets_links_and_overview():
    explorer = ex.rank_collapse_explorer({**RC, "betas": [0.0, 0.01, 1.0, 2.0], "d_qks": [16, 1024],
                                          "ns": [2, 4]})
    data = embedded(explorer)
    assert data["start"] == "2,1,1"                          # the figure's setting: beta 1, d_QK 1024, n 4
    # the presets of PRESETS on this grid, each with the key of its position
    assert [p["id"] for p in data["presets"]] == ["figure", "stall", "wide", "small", "diverge"]
    assert data["presets"][0]["key"] == data["start"] and data["presets"][1]["key"] == "0,1,1"
    link = explorer.link("stall")._repr_mimebundle_()
    assert 'href="#cx-rank-collapse"' in link["text/html"] and 'data-cx-preset="stall"' in link["text/html"]
    assert link["text/plain"] == "the stall: β = 0, d_QK = 1024"
    with pytest.raises(ValueError, match="no preset"):
        explorer.link("nowhere")
    with pytest.raises(ValueError, match="not a grid value"):
        ex.rank_collapse_explorer(RC, start=RC_START, presets=[vega.make_preset("x", "x", "", beta=0.5, d_qk=4, n=2)])
    # a grid without a preset's values keeps the others
    assert [p["id"] for p in embedded(ex.rank_collapse_explorer(RC, start=RC_START))["presets"]] == []
    # the overview: beta across, d_QK up, the other controls where they are; the cell is the
    # chosen beta's last loss over the rank-one floor
    ov = data["overview"]
    rows = vega.overview_rows(ov, data["controls"], data["positions"], [0, 1, 1])
    assert len(rows) == 4 * 2 and sum(r["cur"] for r in rows) == 1
    for r in rows:
        rec = data["positions"][r["key"]]
        assert r["key"].endswith(",1")                      # n stays at 4
        if rec["status"] == "diverged":
            assert r["v"] is None and r["t"] == "div"
        else:
            assert np.isclose(rec["end"], rec["loss"][-1] / rec["floor"], rtol=1e-4)
            assert np.isclose(r["v"], np.log10(rec["end"]), rtol=1e-4, atol=1e-4)
    cells = ov["spec"]["layer"][1]["encoding"]["color"]["scale"]["domain"]
    vs = [r["cell_v"] for r in data["positions"].values() if r["cell_v"] is not None]
    assert cells[0] <= min(vs) and cells[1] >= max(vs)


def test_charts_have_ghost_and_hover_layers():
    data = embedded(ex.convergence_explorer(CV, start=CV_START))
    for chart in data["charts"]:
        names = [layer.get("name") for layer in chart["spec"]["layer"]]
        assert names[0] == "ghost" and "hover_rule" in names and "hover_points" in names
        assert chart["x_name"] == "t"
    assert data["overview"]["x"] == 0 and data["overview"]["y"] == 2   # beta across, d_QK up
    rec = data["positions"]["1,0,1"]
    assert np.isclose(rec["end"], rec["loss"][-1] / rec["loss"][0], rtol=1e-4)


def test_javascript_builds_the_overview_like_python():
    """web/explorer.js builds the overview's rows as convres.vega.overview_rows does."""
    node = shutil.which("node") or (str(Path(convres.__file__).parents[1] / ".venv" / "bin" / "node"))
    if not Path(node).exists():
        pytest.skip("no node to run web/explorer.js")
    data = embedded(ex.convergence_explorer(CV, start=CV_START))
    js = (ROOT / "web" / "explorer.js").read_text()
    fn = js[js.index("  function overviewRows"):js.index("  function readoutHTML")]
    index = [1, 1, 0]
    script = fn + f"\nconsole.log(JSON.stringify(overviewRows({json.dumps(data)}, {json.dumps(index)})));\n"
    out = json.loads(subprocess.run([node, "-e", script], capture_output=True, text=True, check=True).stdout)
    assert out == vega.overview_rows(data["overview"], data["controls"], data["positions"], index)
