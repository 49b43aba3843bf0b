"""The reproduction report's evidence, badges and thumbnails (convres.report), on hand-made claim rows."""

import pytest

from convres import report
from convres.show import fixed

MINUS = "\N{MINUS SIGN}"


def _row(**kw):
    row = {"id": "S2", "experiment": "simulations", "claim": "Even a small residual (beta = 0.1) helps.",
           "tex": r"Even a small residual ($\beta = 0.1$) helps.", "verdict": "inconclusive",
           "effect": 0.18, "ci": [-0.21, 0.56], "interval": "BCa bootstrap, stratified", "margin": 0.1,
           "units": 30, "diverged": 0, "sign_test_p": 0.86, "criterion": "per seed x regime, every 10min",
           "figure": "fig-sim-regimes", "subsets": {"L=2": "partly"},
           "sensitivity": [{"measure": "steps to 1e-2", "protocol": "tuned", "verdict": "partly"}]}
    return {**row, **kw}


def test_fixed_writes_a_minus_sign_and_no_negative_zero():
    assert fixed(-0.214) == f"{MINUS}0.21" and fixed(-0.004) == "0.00" and fixed(0.5, 3) == "0.500"


def test_one_evidence_format_for_every_interval_method():
    assert report.evidence_text(_row()) == (
        f"effect +0.18 (95% interval {MINUS}0.21 to 0.56; margin 0.1; stratified BCa bootstrap, 30 units)")
    t = report.evidence_text(_row(effect=-0.72, ci=[-0.956, -0.484], interval="t-interval", units=10,
                                  margin=0.4, diverged=2))
    assert t == (f"effect {MINUS}0.72 (95% interval {MINUS}0.96 to {MINUS}0.48; margin 0.4; Student's t, "
                 "10 units), 2 diverged")
    # a narrow interval gets the decimals that show two digits of its width
    assert report.effect_text(_row(effect=-0.00146, ci=[-0.00687, 0.00395])) == \
        f"{MINUS}0.001 ({MINUS}0.007 to 0.004)"
    full = report.evidence_text(_row(), full=True)
    assert "sign test p = 0.86" in full and "by subset: L=2 partly" in full
    assert "steps to 1e-2 (tuned step) partly" in full
    assert report.evidence_text(_row(effect=None, ci=None, reason="3 finite units")) == \
        "no interval: 3 finite units"


def test_the_claims_table_and_badges():
    rows = [_row(), _row(id="S1", verdict="reproduced")]
    counts = report.verdict_counts_html(rows)
    assert ">inconclusive</span>&nbsp;1" in counts and ">reproduced</span>&nbsp;1" in counts
    assert "not testable" not in counts and "&nbsp;0" not in counts          # no zero badge
    page = report.claims_html(rows + [_row(id="S5", figure="fig-sim-mechanism")],
                              {"fig-sim-regimes": b"\x89PNG", "fig-sim-mechanism": b"\x89PNG"})
    # each figure once: the second claim of fig-sim-regimes links to it by name
    assert page.count(f"width:{report.THUMBNAIL}px;max-width:none") == 2 and report.THUMBNAIL >= 160
    assert page.count('href="simulations.html#fig-sim-regimes">the same figure</a>') == 1
    assert '<span style="white-space:nowrap">(<span class="math' in page   # "(" stays with its formula
    assert f"{MINUS}0.21 to 0.56" in page


@pytest.mark.parametrize("plain, typeset", [
    ("log10 max(Phi_t / Phi_0, 1e-12)", r"$\log_{10}\max(\Phi_t/\Phi_0,\ 10^{-12})$"),
    ("log10(T_escape(beta = 0) / T_escape(beta = 1))",
     r"$\log_{10}\big(T_{\text{escape}}(\beta = 0)/T_{\text{escape}}(\beta = 1)\big)$"),
    ("Spearman rho of sigma_min(Z_0)", r"Spearman $\rho$ of $\sigma_{\min}(Z_0)$"),
    ("per seed x regime", r"per seed $\times$ regime"),
    ("every 10min", r"every $10\ \text{min}$"),
    ("ln(MSE_{L=2, matched} / MSE_{L=10})",
     r"$\ln(\mathrm{MSE}_{L = 2,\ \text{matched}}/\mathrm{MSE}_{L = 10})$"),
])
def test_criteria_are_typeset(plain, typeset):
    assert report.notation(plain) == typeset
