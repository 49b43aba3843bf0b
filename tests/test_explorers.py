"""The live explorers: their instances and gradient descent (web/model.js) are convres's."""

import base64
import json
import math
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

ROOT = Path(__file__).resolve().parents[1]
MODEL_JS = ROOT / "web" / "model.js"
PNG = b"\x89PNG\r\n\x1a\n"
pytestmark = pytest.mark.usefixtures("fresh_cache")


def node() -> str:
    exe = shutil.which("node") or str(ROOT / ".venv" / "bin" / "node")
    if not Path(exe).exists():
        pytest.skip("no node to run web/model.js")
    return exe


def decoded(b64: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype="<f8")


# Runs web/model.js on one instance of a bank: prints the losses and the status.
RUN_JS = """
const M = require(%s);
const [bank, seed, dqk, opt, steps] = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const inst = {N: bank.N, n: bank.n, d: bank.d, m: bank.m, r: bank.r};
for (const k of ['X', 'R', 'Y']) inst[k] = M.decode(bank.data[seed][k]);
const w = bank.weights[seed + '/' + dqk];
for (const k of ['V', 'W_1', 'W_2', 'W_U', 'P', 'Gq', 'Gk']) inst[k] = M.decode(w[k]);
const run = new M.Run(inst, opt);
let alpha = null;
const first = t => { if (t === 0) alpha = (run.spectra().H[inst.N * inst.n - 1] / 2) ** 2; };
while (run.step(steps, first)) {}
console.log(JSON.stringify({loss: run.loss, status: run.status, alpha}));
"""


def js_run(bank: dict, seed: int, d_qk: int, beta: float, mu: float, scale: str, steps: int) -> dict:
    s = 1 / d_qk if scale == "1/d_qk" else 1 / math.sqrt(d_qk)
    opt = {"beta": beta, "mu": mu, "s": s, "act": bank["act"], "rtol": ex.RTOL,
           "blowup": convres.gd.BLOWUP}
    out = subprocess.run([node(), "-e", RUN_JS % json.dumps(str(MODEL_JS))], check=True, text=True,
                         capture_output=True, input=json.dumps([bank, str(seed), d_qk, opt, steps]))
    return json.loads(out.stdout)


def agree(js, ref) -> bool:
    """The page's losses equal convres's to 1e-9 relative (1e-21 of the start below 1e-12)."""
    js, ref = np.asarray(js), np.asarray(ref)
    return js.shape == ref.shape and bool(np.all(np.abs(js - ref) <= 1e-9 * np.maximum(ref, 1e-12 * ref[0])))


def test_the_bank_is_the_instance():
    """The data as convres draws them; the page's runs (below) check the weights and the logits."""
    b = ex.bank("collapse", [1], [64])
    params, X, Y, cfg = ex.instance("collapse", 1, 64)
    assert np.array_equal(decoded(b["data"]["1"]["X"]), X.numpy().ravel())
    assert np.array_equal(decoded(b["data"]["1"]["Y"]), Y.numpy().ravel())
    assert np.array_equal(decoded(b["weights"]["1/64"]["W_1"]), params["layer1.W_1"].numpy().ravel())
    Gq = decoded(b["weights"]["1/64"]["Gq"]).reshape(b["r"], b["r"])
    assert np.allclose(Gq, Gq.T) and np.all(np.linalg.eigvalsh(Gq) > 0)


@pytest.mark.parametrize("family, seed, d_qk, beta, mu, scale", [
    ("collapse", 0, 1024, 0.0, 0.002, "1/d_qk"),       # the figure's run, on its plateau
    ("collapse", 0, 1024, 1.0, 0.002, "1/d_qk"),       # converges to float64 rounding
    ("collapse", 2, 16, 0.3, 0.005, "1/sqrt(d_qk)"),
    ("simulations", 1, 64, 1.0, 0.002, "1/d_qk"),     # gelu
    ("simulations", 0, 4096, 0.0, 0.003, "1/sqrt(d_qk)"),
    ("collapse", 0, 1024, 2.0, 0.002, "1/d_qk"),       # diverges and stops like convres
])
def test_the_page_computes_what_convres_computes(family, seed, d_qk, beta, mu, scale):
    """web/model.js against convres.gradient_descent, 300 steps (500 in the browser test)."""
    bank = ex.bank(family, [seed], [d_qk])
    got = js_run(bank, seed, d_qk, beta, mu, scale, 300)
    params, X, Y, cfg = ex.instance(family, seed, d_qk, beta=beta, scale=scale)
    _, h = convres.gradient_descent(params, X, Y, cfg, mu, 300, rtol=ex.RTOL)
    assert got["status"] == h.status and agree(got["loss"], h.loss)
    assert (h.status == "diverged") == (beta == 2.0)
    assert got["alpha"] == pytest.approx(convres.lemmas.rate_alpha(params, X, cfg), rel=1e-10)
    nudged = js_run(bank, seed, d_qk, beta, mu * (1 + 1e-7), scale, 300)   # not vacuous: a step 1e-7 larger
    assert h.status == "diverged" or not agree(nudged["loss"], h.loss)


def test_erf_and_singular_values_in_javascript():
    xs = [0.0, 1e-8, 0.1, 0.5, 1.0, 1.7, 2.5, 3.3, 4.9, 5.99, 6.5, -0.3, -2.0, -7.0]
    a = np.random.default_rng(0).standard_normal((8, 12))
    a[3] = a[2] + 1e-9 * np.random.default_rng(1).standard_normal(12)    # a tiny singular value
    script = (f"const M = require({json.dumps(str(MODEL_JS))});\n"
              f"const a = Float64Array.from({json.dumps(a.ravel().tolist())});\n"
              f"console.log(JSON.stringify([{json.dumps(xs)}.map(M.erf), M.singularValues(a, 8, 12)]));")
    out = subprocess.run([node(), "-e", script], check=True, text=True, capture_output=True)
    erf, sv = json.loads(out.stdout)
    assert all(abs(e - math.erf(x)) <= 1e-15 for e, x in zip(erf, xs))    # a few units in the last place
    assert np.allclose(sv, np.linalg.svd(a, compute_uv=False), rtol=1e-6, atol=1e-14)
    assert 1e-10 < sv[-1] < 1e-8


def test_run_and_escape():
    r = ex.run("collapse", 0, 16, 0.0, 0.002, steps=200)
    assert r["escape"] == ex.escape_step(r["loss"], r["floor"]) and 0 < r["escape"] < 200
    stopped = ex.run("collapse", 0, 16, 0.0, 0.002, steps=200, stop_at_escape=True)
    assert len(stopped["loss"]) == r["escape"] + 1 and stopped["loss"] == r["loss"][:r["escape"] + 1]
    assert ex.escape_step([3.0, 2.0], 1.0) is None and ex.escape_step([3.0, 0.4, 0.6], 1.0) == 1
    with pytest.raises(ValueError, match="unknown family"):
        ex.instance("bogus", 0, 4)


def test_page_element_and_static_figure():
    setting = dict(beta=1.0, mu=0.002, d_qk=16, seed=0, scale="1/d_qk")
    explorer = ex.Explorer("test", "Test explorer", "collapse", seeds=[0], d_qks=[4, 16], start=setting,
                           horizon=40, presets=[ex._preset("one", "one", "look", **setting)], alt="Alt text.")
    bundle = explorer._repr_mimebundle_()
    assert set(bundle) == {"text/html", "image/png", "text/plain"}
    html = bundle["text/html"]
    assert 'id="cx-test"' in html and html.count("<script") == 1 and "<input" not in html
    raw = re.search(r'<script type="application/json" class="cx-data">(.*?)</script>', html, re.S)
    data = json.loads(raw.group(1).replace("<\\/", "</"))
    assert data["start"]["d_qk"] == 16 and set(data["bank"]["weights"]) == {"0/4", "0/16"}
    assert data["escape"] == ex.ESCAPE and data["scales"] == ["1/sqrt(d_qk)", "1/d_qk"]
    png = base64.b64decode(bundle["image/png"])
    width, height = struct.unpack(">II", png[16:24])
    assert png.startswith(PNG) and width > 1.5 * height     # two panels side by side
    link = explorer.link("one")
    assert 'href="#cx-test"' in link._repr_html_() and 'data-cx-preset="one"' in link._repr_html_()
    assert repr(link) == "one"
    with pytest.raises(ValueError, match="no preset"):
        explorer.link("nowhere")


def test_the_book_explorers():
    """The chapters' explorers: settings on their controls, preset ids, the web/model.js family."""
    rc, cv, th = ex.rank_collapse_explorer(), ex.convergence_explorer(), ex.theorem_explorer(seeds=[0])
    for e in (rc, cv, th):
        f = ex.FAMILIES[e.family]
        assert f["N"] * f["n"] <= f["d"] and not any(v % 4 for v in (f["N"] * f["n"], f["d"], f["m"]))
        assert all(re.fullmatch(r"[a-z0-9-]+", p["id"]) for p in e.presets)
        for v in [e.start, *(p["values"] for p in e.presets)]:
            assert set(v) == {"beta", "mu", "d_qk", "seed", "scale"}
            assert e.beta_range[0] <= v["beta"] <= e.beta_range[1]
            assert e.mu_range[0] <= v["mu"] <= e.mu_range[1]
            assert v["d_qk"] in e.d_qks and v["seed"] in e.seeds and v["scale"] in convres.SCALES[:2]
    assert rc.start == rc.preset("figure")["values"] and cv.start == cv.preset("linear")["values"]
    assert rc.family == "collapse" and cv.family == "simulations"
    params, X, Y, cfg = convres.instances.theorem_instance(0)
    assert th.start["mu"] == convres.theory.theorem_run(params, X, Y, cfg, steps=1, seed=0).mu
    assert torch.equal(ex.instance("theorem", 0, 16, beta=1.0, scale="1/sqrt(d_qk)")[0]["W_U"], params["W_U"])
