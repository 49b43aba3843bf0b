"""The chapters' tables: TeX in headers and cells, readable values, no index; TeX and its plain text."""

import pandas as pd
import pytest

from convres import init_params, show, synthetic_regression
from convres.instances import theorem_instance
from convres.lemmas import mu_max
from convres.model import ModelConfig
from convres.report import claims_table, hypotheses_table
from convres.show import HTMLBlock, fixed, glues, number, plain, sci, table, tex
from convres.theory import check_assumptions, ffn_theorem_run

MATH = '<span class="math notranslate nohighlight">'


def test_tex_marks_math_and_escapes_the_rest():
    assert tex(r"a $\beta$ <b>") == rf"a {MATH}\(\beta\)</span> &lt;b&gt;"
    assert tex("no math") == "no math"
    with pytest.raises(ValueError, match="unbalanced"):
        tex("one $ only")


def test_table_headers_values_and_index():
    html = table([{r"$\beta$": 0.1234, "ok": True, "steps": 1024, "name": "x"},
                  {r"$\beta$": None, "ok": False, "steps": 3, "name": "$d_{QK}$"}],
                 {"steps": "{:,} steps"}).to_html()
    assert rf"{MATH}\(\beta\)</span></th>" in html and rf"{MATH}\(d_{{QK}}\)</span>" in html
    assert ">0.123<" in html and ">yes<" in html and ">no<" in html and ">1,024 steps<" in html
    assert "True" not in html and "None" not in html and "nan" not in html
    assert "row_heading" not in html                                  # no index column
    frame = pd.DataFrame({"v": [1.5]}, index=["$W_U$"])
    assert rf"{MATH}\(W_U\)</span>" in table(frame, index=True).to_html()
    assert ">1.5<" in table({"v": [1.5]}).to_html()                   # a mapping of columns
    assert r"\(6.45 \times 10^{-10}\)" in table({"v": [6.45e-10]}).to_html()
    with pytest.raises(ValueError, match="does not have"):
        table([{"a": 1}], {"b": "{}"})


def test_plain_reads_tex_in_a_terminal_and_numbers_read_in_prose():
    assert plain(r"$Nn \le d$, $\|X\|_2 \ge 1$") == "Nn <= d, ||X||_2 >= 1"
    assert plain(r"$\ln(\mathrm{MSE}_{\text{none}}/\mathrm{MSE}_{L = 2})$") == "ln(MSE_{none}/MSE_{L = 2})"
    assert plain("no math") == "no math"
    assert number(-0.095) == "\N{MINUS SIGN}0.095" and number(-1e-5) == "\N{MINUS SIGN}1e-05"
    assert number(-0.0) == "0" and sci(0.00123) == r"$1.2 \times 10^{-3}$"
    assert fixed(-0.214) == "\N{MINUS SIGN}0.21" and fixed(-0.004) == "0.00" and fixed(0.5, 3) == "0.500"


def test_every_checked_hypothesis_carries_its_tex():
    """Every statement is balanced TeX with a plain reading, shown as math."""
    params, X, Y, cfg = theorem_instance(0, beta=1.0)
    checks = check_assumptions(params, X, Y, cfg, mu=mu_max(params, X, Y, cfg), steps=10)
    assert {c.name: c.to_dict()["text"] for c in checks}["width"] == "Nn <= d"
    cfg = ModelConfig(d=8, d_qk=8, m=64, c=1, activation="gelu", beta=1.0)
    X, Y = synthetic_regression(2, 4, 8, 1, seed=0)
    run = ffn_theorem_run(init_params(cfg, seed=1), X, Y, cfg, mu=0.002, steps=3, smoothness_iters=2)
    for hypotheses in (checks, run.hypotheses):
        for h in hypotheses:
            assert tex(h.tex) and "$" not in h.text and "\\" not in h.text, h
        html = hypotheses_table(hypotheses).to_html()
        assert "$" not in html and html.count(MATH) >= sum("$" in h.tex for h in hypotheses)


def test_claims_table_reads_claim_rows():
    rows = [dict(claim="larger beta faster", tex=r"larger $\beta$ faster", verdict="partly", effect=0.31,
                 ci=(0.1, 0.5), margin=0.4, units=10, diverged=1),
            dict(claim="a check", tex="a check", verdict="inconclusive")]
    html = claims_table(rows).to_html()
    assert rf"larger {MATH}\(\beta\)</span> faster" in html
    assert ">0.10 to 0.50<" in html and ">10 (1 diverged)<" in html and ">0.31<" in html


def test_a_table_reads_as_text_where_html_is_not_shown():
    """The PDF shows a cell's text/plain: a table's cells, never an object's address."""
    text = repr(table([{r"$\beta$": 0.1, "holds": True, "regime": r"$d_{QK} = 4$"}]))
    assert "Styler" not in text and "beta" in text and "yes" in text and "d_{QK} = 4" in text
    assert "$" not in text and "\\" not in text
    block = HTMLBlock("<table><tr><th>claim</th><th>verdict</th></tr>"
                      "<tr><td>a &amp; b</td><td><span>$x$</span></td></tr></table>")
    assert block._repr_html_().startswith("<table>") and repr(block) == "claim | verdict\na & b | x"
    assert repr(HTMLBlock('<a href="#e">β = 1, d<sub>QK</sub> = 4</a>')) == "β = 1, d_QK = 4"


def test_glues_by_the_format_and_the_chapters_seconds(monkeypatch):
    seen = {}
    monkeypatch.setattr("myst_nb.glue", lambda name, value, display: seen.update({name: (value, display)}))
    glues("{:.2f}".format, a=1.234, b="as is")
    glues(c=3)
    glues(".1e", d=0.000123)
    monkeypatch.setattr(show, "_STARTED", show.time.perf_counter() - 12.4)
    show.glue_seconds("x_seconds")
    assert seen == {"a": ("1.23", False), "b": ("as is", False), "c": ("3", False), "d": ("1.2e-04", False),
                    "x_seconds": ("12", False)}
    assert show.superscript_sci(3.2e-18) == "3.2 × 10⁻¹⁸" and show.superscript_sci(150) == "1.5 × 10²"


def test_span_and_within_read_a_range():
    assert show.span([3.42, 1.21]) == "1.2 to 3.4" and show.span((7, 3), ".0f", "-") == "3-7"
    assert show.span([1.118, 1.122], ".2f") == "1.12"
    assert show.within(0.5, 0, 1) and show.within([1, 2], 0.5, 2.5) and not show.within([1, 2], 1, 3)
    assert show.within([1, 5], [0, 4], [2, 6]) and not show.within(float("nan"), 0, 1)
