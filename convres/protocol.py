"""Protocol v4 (the commit tagged ``protocol-v4``): how each claim of the paper is measured and graded.

A :class:`Claim` gives one effect per paired *unit* (a seed, or a seed in a pre-named regime or
depth), positive in the paper's direction, with a ``margin`` on the same scale;
:func:`convres.stats.grade` decides the verdict, a failed design :class:`Check` makes it *not
testable*; alternatives are graded alike but only the primary counts. Later changes: :data:`DEVIATIONS`.
"""

from __future__ import annotations

import dataclasses
import math

from .show import plain

TAG = "protocol-v4"
#: The grades, in the order :func:`convres.stats.grade` tries them (after *not testable*).
GRADES = ("reproduced", "partly", "not reproduced", "reversed", "inconclusive", "not testable")
LEVEL = 0.95                  # every interval is a 95% interval
T_INTERVAL_BELOW = 20         # a t-interval for n < 20 units, a BCa bootstrap for n >= 20
BOOTSTRAP_DRAWS = 10_000      # resamples of the BCa bootstrap (generator seed 0)
#: No effect on a log or rank scale is larger: ``|ln(a/b)| <= 1,489`` for positive float64 a, b.
EFFECT_BOUND = 1e4
LOG_LOSS_FLOOR = 1e-12        # the floor of Phi_t / Phi_0 in the mean log-loss

#: Seeds: pilots (levels, design checks), probes (step sizes), evaluation (graded); disjoint.
EVALUATION_SEEDS = {"book": tuple(range(10)), "paper": tuple(range(20))}
PROBE_SEEDS = (100, 101, 102)
PILOT_SEEDS = (200, 201)
#: Fewest finite units (diverged runs left out) a grade is given on, per profile; ``smoke`` only
#: exercises the code (its numbers mean nothing; 2 is the fewest a t-interval takes).
MIN_UNITS = {"book": 10, "paper": 20, "smoke": 2}

#: Step sizes (section 2): a factor-2 grid per arm scored on the probe seeds; an unresolved score
#: (every probe run censored) doubles the probe horizon, at most to 4x the evaluation horizon; the
#: chosen step is at most half the largest step stable on every probe seed.
GRID_FACTOR = 2.0
PROBE_HORIZON_MAX = 4
STABLE_FRACTION = 0.5
#: An arm that diverges at its tuned step on an evaluation seed is rerun, every seed, at half the step.
RERUN_FACTOR = 0.5
#: "tuned": each arm at its own step (primary); "common": every arm at the smallest tuned step.
PROTOCOLS = ("tuned", "common")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim: ``id``, the paper's words (``tex``), the primary ``measure`` per ``unit`` on its
    ``scale``, the ``sign`` of a positive effect, ``margin``, ``rule`` (non-inferiority for T3), the
    strata ``subsets`` (``every``: reproduced in each), ``alternatives`` ``(measure, protocol)`` and
    the design ``checks``; S5 is a mean of Spearman's rho (:func:`convres.stats.seed_spearman`)."""

    id: str
    tex: str
    measure: str
    unit: str
    scale: str
    sign: str
    margin: float
    checks: tuple[str, ...]
    alternatives: tuple[tuple[str, str], ...] = ()
    subsets: tuple[str, ...] = ()
    every: bool = False
    rule: str = "superiority"

    @property
    def text(self) -> str:
        return plain(self.tex)

    @property
    def experiment(self) -> str:
        return {"S": "simulations", "J": "jena", "T": "sst2"}[self.id[0]]

    @property
    def bound(self) -> float | None:
        """The largest size an effect can have (1 for Kendall's tau), else ``None``."""
        return 1.0 if self.scale == _TAU else None


@dataclasses.dataclass(frozen=True)
class Check:
    """A design check of section 3, run before the evaluation: passes iff ``value <op> threshold``."""

    name: str
    experiment: str
    tex: str
    op: str
    threshold: float

    @property
    def text(self) -> str:
        return plain(self.tex)

    def passes(self, value: float) -> bool:
        t = self.threshold
        return {"<": value < t, "<=": value <= t, ">=": value >= t, ">": value > t}[self.op]


@dataclasses.dataclass(frozen=True)
class Deviation:
    """A change to the protocol: ``what``, ``when``, ``why`` (``$...$`` TeX) and the claims it ``touches``."""

    what: str
    when: str
    why: str
    touches: tuple[str, ...]
    after_runs: bool = False   # made after the v4 runs had been seen


REGIMES = ("wide", "narrow", "uniform attention")
DEPTHS = ("L=2", "L=6", "L=10")
_SPEED = (("steps to 1e-2", "tuned"), ("steps to 1e-6", "tuned"), ("mean log-loss", "common"))
_LEVEL = (("steps to the level", "tuned"), ("mean log-loss", "common"))
_SIM = ("simulations tuning resolves", "simulations runs stable")
_SST = ("sst2 arms alive", "sst2 within-sentence share", "sst2 pooled sigma ratio")
#: Jena's claims need (b), (c) and order-awareness; (a) gates only the steps to the level (a deviation).
_JENA = ("jena reachable", "jena equal start", "jena order-aware")
#: The alternative measures by the name the runners grade them under, and their TeX where it differs.
ALTERNATIVES = {"steps to 1e-2": r"steps to $10^{-2}$", "steps to 1e-6": r"steps to $10^{-6}$",
                "unmatched L = 2": r"unmatched $L = 2$", "ln MSE ratio": r"$\ln$ MSE ratio",
                "-mean log-loss": "\N{MINUS SIGN}mean log-loss"}
_LL = r"mean log-loss (mean over $t = 1, \dots, T$ of $\log_{10}\max(\Phi_t/\Phi_0,\ 10^{-12})$)"
_B01 = r"$\beta = 0$ minus $\beta = 0.1$"
_TAU, _BY_SEED_REGIME, _BY_SEED_DEPTH = r"$\tau$", r"seed $\times$ regime", r"seed $\times$ depth"
_NOT_COLLAPSED = "the non-collapsed arm without residuals"
_LN11 = math.log(1.1)
CLAIMS = {c.id: c for c in [
    Claim("S1", "The stronger the residual, the faster gradient descent converges.",
          rf"$-\tau$ (Kendall) of $\beta$ against the {_LL}", _BY_SEED_REGIME, _TAU,
          r"larger $\beta$, lower", 0.4, _SIM, _SPEED, REGIMES),
    Claim("S2", r"Even a small residual ($\beta = 0.1$) converges faster than none.", f"{_LL} of {_B01}",
          _BY_SEED_REGIME, "decades", r"$\beta = 0.1$ lower", 0.1, _SIM, _SPEED, REGIMES),
    Claim("S3", "Without the residual, training stalls where attention is nearly uniform (tested: a "
          "plateau, ten times longer or more).", r"$\log_{10}\big(T_{\text{escape}}(\beta = 0)/"
          r"T_{\text{escape}}(\beta = 1)\big)$, scale $1/d_{QK}$, the largest $d_{QK}$", "seed", "decades",
          r"$\beta = 0$ escapes later", 1.0, _SIM, (("steps to 1e-2", "tuned"), ("escape time", "common"))),
    Claim("S4", r"The stall grows as $d_{QK}$ grows.", r"$\tau$ (Kendall) of $d_{QK}$ against "
          r"$T_{\text{escape}}(\beta = 0)$, scale $1/d_{QK}$", "seed", _TAU,
          r"later escape at larger $d_{QK}$", 0.4, _SIM, (("escape time", "half step"),)),
    Claim("S5", r"The rate is set by $\sigma_{\min}$ of the attention output (the paper's mechanism).",
          r"Spearman $\rho$ over the seeds of $\sigma_{\min}(Z_0)$ against the rate (slope of $-\ln \Phi_t$ "
          r"over its linear phase) within each regime $\times$ $\beta$, mean over them", "seed in a regime",
          r"$\rho$",
          r"larger $\sigma_{\min}$, faster", 0.3, _SIM, (("-mean log-loss", "tuned"),), REGIMES),
    Claim("J1", r"Larger $\beta$ converges faster.", rf"$-\tau$ (Kendall) of $\beta$ against the {_LL}",
          "seed", _TAU, r"larger $\beta$, lower", 0.4, _JENA, _LEVEL),
    Claim("J2", r"Even a small $\beta$ (0.1) beats $\beta = 0$.", f"{_LL} of {_B01}", "seed", "decades",
          r"$\beta = 0.1$ lower", 0.05, _JENA, _LEVEL),
    Claim("T1", "With residuals the training loss is consistently lower.",
          r"$\ln(\mathrm{MSE}_{\text{none}}/\mathrm{MSE}_{\text{res}})$ at the horizon, " + _NOT_COLLAPSED,
          _BY_SEED_DEPTH, r"$\ln$", "residual lower", _LN11, _SST,
          (("norm-preserving arm", "tuned"), ("ln MSE ratio", "common")), DEPTHS, every=True),
    Claim("T2", "With residuals the loss improves with depth.",
          r"$\ln(\mathrm{MSE}_{L = 2,\ \text{matched}}/\mathrm{MSE}_{L = 10})$, residual arms", "seed",
          r"$\ln$", r"$L = 10$ lower", _LN11, ("sst2 arms alive", "sst2 matched shallow arm"),
          (("unmatched L = 2", "tuned"), ("ln MSE ratio", "common"))),
    Claim("T3", "Without residuals depth does not help.",
          r"$\ln(\mathrm{MSE}_{L = 10}/\mathrm{MSE}_{L = 2})$, " + _NOT_COLLAPSED, "seed", r"$\ln$",
          "depth does not help", -_LN11, _SST, (("collapsed arm", "tuned"), ("ln MSE ratio", "common")),
          rule="non-inferiority"),
    Claim("T4", "Residuals reach a given loss sooner.", f"{_LL} of none minus residual, {_NOT_COLLAPSED}",
          _BY_SEED_DEPTH, "decades", "residual lower", 0.1, _SST, _LEVEL, DEPTHS),
]}

CHECKS = {c.name: c for c in [
    Check("simulations tuning resolves", "simulations", "arms whose step tuning stays unresolved", "<=", 0),
    Check("simulations runs stable", "simulations", r"evaluation runs still diverged at the step they are "
          r"graded at, after the reruns at half the step (every $d_{QK}$ and regime)", "<=", 0),
    Check("jena informative", "jena", "training MSE of the best order-blind predictor (least squares on the "
          "mean, std, min, max of each feature; the model without the age on the pilot seeds) over the speed "
          "level", ">", 1.0),
    Check("jena order-aware", "jena", "pilot runs with the age that do not end below the best end of the "
          "model without it (pilot seeds)", "<=", 0),
    Check("jena reachable", "jena", r"pilot runs (every $\beta$, 2 pilot seeds) that do not reach the level "
          "within half the horizon", "<=", 0),
    Check("jena equal start", "jena", r"largest relative difference of the initial loss between the values "
          r"of $\beta$ of a seed", "<", 0.01),
    Check("sst2 arms alive", "sst2", r"largest $|\log_{10}(\text{output std of an arm}/\text{the residual "
          r"arm's})|$ at init", "<=", 1.0),
    Check("sst2 within-sentence share", "sst2", "within-sentence share of the non-collapsed arm without "
          "residuals at init (smallest over depths)", ">=", 0.5),
    Check("sst2 pooled sigma ratio", "sst2", r"pooled $\sigma_{\min}/\sigma_{\max}$ of the non-collapsed arm "
          "over the residual arm's at init (smallest over depths)", ">=", 0.1),
    Check("sst2 matched shallow arm", "sst2", r"$|\text{parameters of the matched } L = 2 \text{ arm}/"
          r"\text{those of } L = 10 - 1|$", "<=", 0.05),
]}

def _late(what: str, when: str, why: str, touches: tuple[str, ...]) -> Deviation:
    """A :class:`Deviation` made after the v4 runs had been seen."""
    return Deviation(what, when, why, touches, after_runs=True)


_BEFORE = "in the protocol-v4 commit, before any v4 run"
_SST2_RERUN = "2026-12-06, after the v4 book run of SST-2 (745520a); that run recomputed"
DEVIATIONS = (
    _late(r"an interval of Kendall's $\tau$ is cut to $[-1, 1]$, the range of $\tau$",
              "2026-12-06, after the v4 runs; no verdict changes (a grade compares an end with 0 or a margin "
              "inside the range)", r"a t-interval of a mean of $\tau$ can pass 1 (S4 in the book's run: 0.89 "
              "to 1.04), which no $\tau$ reaches", ("S1", "S4", "J1")),
    Deviation("S5 is a rank correlation over runs, not a mean of paired unit effects: its interval is a "
              "BCa bootstrap over the runs resampled within each regime at every n, with no sign test",
              _BEFORE, "section 1's t-interval and sign test need one effect per unit; a correlation has "
              "none",
              ("S5",)),
    Deviation("a claim is graded only on at least MIN_UNITS finite units (10 book, 20 paper), diverged "
              "runs left out; below it the grade is inconclusive until the arm is rerun at half its step",
              _BEFORE, "section 1 asks for 10 (20) seeds per claim but says nothing of a claim that falls "
              "below them when runs diverge", tuple(CLAIMS)),
    Deviation(r"alternatives are graded with the primary's margin; speed alternatives as $\log_{10}$ ratios "
              "of steps (decades, like the primary)", _BEFORE,
              "section 4 names the alternative measures but not their margins", tuple(CLAIMS)),
    Deviation(r"S3 is measured at the largest $d_{QK}$ of the escape runs; T4 against the non-collapsed arm",
              _BEFORE, r"section 4 leaves the $d_{QK}$ of S3 and the arm of T4 unnamed", ("S3", "T4")),
    _late("Jena check (a) is judged on the least-squares fit of the window statistics and the model "
              "without the age (it fails in both profiles) and gates only the steps to the level, "
              "which become not testable; the mean log-loss stays graded, order-awareness shown by "
              "persistence_weights and by the new check that every pilot with the age ends below the "
              "model without it", "2026-12-06, after the v4 runs; regraded from the stored runs "
              "(the design checks are computed from them at load)", "the ridge with its lambda chosen out of "
              "sample is not the best order-blind fit of the training windows, which a training-MSE "
              "level measures (review8 M5)", ("J1", "J2")),
    _late(r"S5 is the mean over the regime $\times$ $\beta$ strata of Spearman's $\rho$ across the "
              "seeds, its BCa bootstrap resampling seeds (a seed's runs share their weights); it replaces "
              r"deviation 2's $\rho$ over every run of a regime",
              "2026-12-06, after the v4 runs; regraded from the stored runs",
              r"within a regime $\sigma_{\min}(Z_0)$ is almost a function of $\beta$, so "
              r"the pooled $\rho$ restated S1 (review8 M4, m7)", ("S5",)),
    _late(r"simulations check (b) is judged on the evaluation runs: it counts those still diverged at "
              "the step they are graded at after the reruns; the runs that diverged at their tuned step "
              "are counted beside it (first passes included)", "2026-12-06, after the v4 runs; regraded "
              "from the stored runs", "on the probe runs it could not fail (the chosen step is stable on "
              "every probe seed), and a divergence at the tuned step is what section 1's rerun rule "
              "handles (review8 m1)", ("S1", "S2", "S3", "S4", "S5")),
    _late("SST-2 trains on distinct 10-token prefixes: one row per prefix, prefixes whose rows carry "
              "both labels and those of the validation split dropped, then n_train/2 of each label",
              _SST2_RERUN, "issue 33 asks for deduplicated sentences; 17% of the paper profile's prefixes "
              "repeated and 195 groups carried both labels (review8 M7)", ("T1", "T2", "T3", "T4")),
    _late("SST-2 probes the step sizes at the evaluation horizon (200 steps book, 250 paper), not 50/60",
              _SST2_RERUN, "a step stable for 50 steps diverged within 200 (L = 6 isometric: 2 of 10 "
              "seeds at the tuned step, a third at half of it; halved twice; review8 M6)",
              ("T1", "T2", "T3", "T4")),
    _late("an SST-2 arm rerun at half its step after another piece's seed diverged records every pass: "
              "the seeds that diverged and the step of each (setting 'halvings')", _SST2_RERUN,
              "one-seed pieces decide a rerun across pieces; section 1 asks that diverged runs be counted "
              "and reported (review8 M6)", ("T1", "T2", "T3", "T4")),
    _late(r"T4 is the mean over $t$ of $\log_{10}(\Phi_t/\Phi_{\text{ref}})$, one $\Phi_{\text{ref}}$ "
              r"per unit: the arms' absolute mean log-losses, not each relative to its own $\Phi_0$",
              _SST2_RERUN, "the residual stacks start 1.7-1.9x higher, which made about 90% of T4's effect "
              "(review8 M1)", ("T4",)),
    _late("T3 is not testable unless the shallowest non-collapsed arm trains: its median final training "
              "MSE below the floor's (least squares on the mean vector)", _SST2_RERUN,
              "an equivalence of two arms that stopped learning says nothing of depth (review8 M2)", ("T3",)),
    _late("T1, T2 and T4 take T3's precondition: a claim is not testable unless every arm it says is "
              "worse trains, its median final training MSE below the floor's (T1 and T4 the isometric arm "
              "at every depth, T2 the matched L = 2 arm); at the paper scale a pilot on the two pilot seeds "
              "decides, before the evaluation seeds run, which claims that run can grade "
              "(benchmarks/sst2_paper_pilot.py)",
              "2026-12-07, after the v4 book run of SST-2; regraded from the stored runs, before the paper "
              "pilot ran", "the isometric arm's start leaves its attention almost no gradient (the block's "
              "gain in W_2; most attention rows put more than 0.999 of their weight on one token) and it "
              "does not train, so a contrast with it is decided at initialization, not by gradient descent "
              "(review10 M1, M2; review12 M1)",
              ("T1", "T2", "T4")),
    _late("the SST-2 precondition applies per measure and depth: each measure, the alternatives too, "
              "is graded on the units whose own reference trains (T1, T4 at the unit's depth, T2 at L = 2, "
              "T3 at both depths it compares); a depth where it does not is not testable",
              "2026-12-07, after the v4 runs and the paper pilot; regraded from the stored runs",
              "applied per claim, the precondition also set to not testable the alternatives whose own "
              "reference trains; an "
              "equivalence of two depths says nothing if either stopped learning (review11 M1, review12 m1, "
              "m4)", ("T1", "T2", "T3", "T4")),
    _late("T1-T3 name their budget: training MSE after T full-batch steps (200 book, 250 paper), not "
              "at convergence; T2 states the unmatched shallow arm's effect and grade beside the matched",
              _SST2_RERUN, "no arm has converged at the horizon, and the matched arm trains worse than the "
              "unmatched one (review8 M3, m6)", ("T1", "T2", "T3")),
)
