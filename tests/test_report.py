"""The reproduction report's evidence, badges and thumbnails (convres.report), on hand-made claim rows."""

from convres import protocol, report, tables

MINUS = "\N{MINUS SIGN}"


def _row(**kw):
    row = {"id": "S2", "experiment": "simulations", "claim": "Even a small residual (beta = 0.1) helps.",
           "tex": r"Even a small residual ($\beta = 0.1$) helps.", "verdict": "inconclusive",
           "effect": 0.18, "ci": [-0.21, 0.56], "interval": "BCa bootstrap, stratified", "margin": 0.1,
           "units": 30, "diverged": 0, "sign_test_p": 8.8e-5, "criterion": r"per seed $\times$ regime",
           "figure": "fig-sim-regimes", "subsets": {"L=2": "partly"},
           "sensitivity": [{"measure": "steps to 1e-2", "tex": r"steps to $10^{-2}$", "protocol": "tuned",
                            "verdict": "partly"}]}
    return {**row, **kw}


def test_one_evidence_format_for_every_interval_method():
    assert report.evidence_text(_row(verdict="partly")) == (
        f"effect +0.18 (95% interval {MINUS}0.21 to 0.56; margin 0.1; stratified BCa bootstrap, 30 units)")
    # the alternatives that grade otherwise are shown, and a not testable's reason
    assert report.evidence_text(_row()).endswith("units); alternatives: steps to $10^{-2}$ (tuned step) partly")
    assert report.evidence_text(_row(verdict="not testable", sensitivity=[], reason="check (a) failed")) \
        .endswith("30 units); check (a) failed")
    t = report.evidence_text(_row(effect=-0.72, ci=[-0.956, -0.484], interval="t-interval", units=10,
                                  margin=0.4, diverged=2, verdict="partly"))
    assert t == (f"effect {MINUS}0.72 (95% interval {MINUS}0.96 to {MINUS}0.48; margin 0.4; Student's t, "
                 "10 units), 2 diverged")
    # a narrow interval gets the decimals that show two digits of its width
    assert report.effect_text(_row(effect=-0.00146, ci=[-0.00687, 0.00395])) == \
        f"{MINUS}0.001 ({MINUS}0.007 to 0.004)"
    full = report.evidence_text(_row(), full=True)
    assert r"sign test $p = 8.8 \times 10^{-5}$" in full and "by subset: L=2 partly" in full
    assert r"steps to $10^{-2}$ (tuned step) partly" in full
    assert report.evidence_text(_row(effect=None, ci=None, reason="3 finite units", sensitivity=[])) == \
        "no interval: 3 finite units"
    assert f"margin {MINUS}0.095;" in report.evidence_text(_row(margin=-0.0953))


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


def test_criteria_and_measurements_are_typeset_from_the_rows_tex():
    page = report.criteria_html([_row(), _row(id="S3", effect=None, ci=None, reason="3 finite units")])
    assert "$" not in page and r"\(\times\)" in page and r"\(10^{-2}\)" in page
    assert r"\(p = 8.8 \times 10^{-5}\)" in page


def test_the_chapters_tables_name_places_and_steps():
    assert tables.place("escape, scale 1/d_qk, d_QK = 16") == r"escape, scale $1/d_{QK}$, $d_{QK} = 16$"
    assert tables.place("wide") == "wide"
    steps = tables.step_sizes_table([{"arm": "wide, beta = 0", "chosen": 0.5, "best": 1, "largest_stable": 1},
                                     {"arm": "wide, beta = 1", "chosen": 0.25, "best": 0.25,
                                      "largest_stable": 0.5}]).to_html()
    assert ">0.5 (1, 1)<" in steps and ">0.25 (0.25, 0.5)<" in steps and steps.count("<tr>") == 2
    build = tables.records({"id": "id", "mean": ("m.median", "{:.2f}"), "twice": lambda r: 2 * r["id"]},
                           order=lambda r: -r["id"])
    frame = build([{"id": 1, "m": {"median": 0.5}}, {"id": 2, "m": {"median": 0.25}}]).data
    assert frame.to_dict("list") == {"id": [2, 1], "mean": [0.25, 0.5], "twice": [4, 2]}


def test_the_build_environment_and_the_theorem_chapters(tmp_path, monkeypatch):
    lines = tables.environment().splitlines()
    assert lines[0].startswith("Python ") and any(x.startswith("torch ") for x in lines)
    assert lines[-1].startswith("built ") and "torch threads" in lines[-1]
    (tmp_path / "a.md").write_text("# A\n\n```{prf:theorem} One\n:label: a\n```\n")
    (tmp_path / "b.md").write_text("# B\n\n```{prf:lemma} Two\n```\n")
    assert tables.theorem_chapters(tmp_path) == ["a"]
    monkeypatch.chdir(tmp_path)                   # the book's own chapters, from any working folder
    assert "theorem" in tables.theorem_chapters()


def test_the_report_states_the_protocol_and_marks_the_deviations_after_the_runs():
    late = report.late_deviations()
    assert late and all(("after the v4" in d.when) == (i in late)
                        for i, d in enumerate(protocol.DEVIATIONS, 1))
    claims = report.protocol_claims_table()
    marked = dict(zip(claims.data["id"], (v.split(", ") for v in claims.data["deviations after the runs"])))
    assert all(str(i) in marked[c] for i, on in late.items() for c in on)
    assert all(v == ["none"] for c, v in marked.items() if not any(c in on for on in late.values()))
    numbers = list(report.protocol_deviations_table().data["#"])
    assert numbers == list(range(1, len(protocol.DEVIATIONS) + 1))
    checks = report.protocol_checks_table().to_html()
    assert "$" not in claims.to_html() + checks + report.protocol_deviations_table().to_html()
    assert all(name in checks for name in protocol.CHECKS)
    assert "100, 101, 102" in report.protocol_seeds_table().to_html()


def test_the_two_scales_table_says_why_a_larger_run_was_not_made():
    class Rows:
        def claims(self):
            return [_row(id="T1")]

    book = {"sst2": Rows()}
    decided = report.scale_html(book, {"sst2": None}, {"sst2": "no reference trains on the pilot"})
    assert "no reference trains on the pilot" in decided and ">not testable</span>" in decided
    assert "not computed yet" in report.scale_html(book, {"sst2": None})
