"""The command line: in-process calls of ``main``, and one subprocess smoke test of the real entry
point (help, version, a closed pipe)."""

import json
import subprocess
import sys

import pytest

from convres import __version__
from convres.cli import build_parser, main
from convres.model import ACTIVATIONS


def run_main(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_entry_point_in_a_subprocess():
    """`python -m convres` runs: help, version, and no traceback when the reader closes the pipe."""
    out = subprocess.run([sys.executable, "-m", "convres", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and all(c in out.stdout for c in ("gd", "theorem", "reproduce", "rank-collapse"))
    out = subprocess.run([sys.executable, "-m", "convres", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and __version__ in out.stdout
    p = subprocess.run([sys.executable, "-c", "import sys; sys.argv = ['convres', 'gd', '--steps', '5']; "
                        "from convres.cli import main; sys.exit(main())"], capture_output=True, text=True)
    assert p.returncode == 0
    closed = subprocess.Popen([sys.executable, "-m", "convres", "gd", "--steps", "5"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    closed.stdout.close()
    assert b"Traceback" not in closed.stderr.read()
    closed.wait()


def test_gd_json(capsys):
    code, out, _ = run_main(capsys, "gd", "--steps", "20", "--json")
    result = json.loads(out)
    assert code == 0 and result["steps"] == 20 and result["final_loss"] < result["initial_loss"]


@pytest.mark.parametrize("args,message", [
    (("gd", "--mu", "-1"), "--mu: must be > 0"),
    (("gd", "--activation", "nope"), "invalid choice: 'nope'"),
    (("gd", "--beta", "nan"), "--beta: must be a finite number"),
    (("gd", "--beta", "1e300"), "--beta: must be >= 0 and <= 1000"),
    (("gd", "--seed", "-1"), "--seed: must be >= 0"),
    (("gd", "--seed", str(2**70)), "--seed: must be >= 0 and <= "),
    (("gd", "--N", str(10**30)), "--N: must be >= 1 and <= 1000000"),
    (("gd", "--layers", "1000000000"), "--layers: must be >= 1 and <= 1000"),
    (("theorem", "--seed", "-5"), "--seed: must be >= 0"),
    (("rank-collapse", "--seed", "-1"), "--seed: must be >= 0"),
])
def test_bad_arguments_give_one_clear_line(capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and "Traceback" not in err


def test_activation_choices_come_from_the_model():
    gd = build_parser()._subparsers._group_actions[0].choices["gd"]
    (action,) = [a for a in gd._actions if a.dest == "activation"]
    assert tuple(action.choices) == tuple(sorted(ACTIVATIONS))


def test_a_run_too_large_for_memory_is_refused_before_allocating(capsys):
    code, out, err = run_main(capsys, "gd", "--d", "100000", "--json")
    assert code == 2 and out == "" and "GiB of memory" in err and "use smaller sizes" in err


def test_json_output_is_all_or_nothing(capsys, monkeypatch):
    import convres.cli as cli
    monkeypatch.setattr(cli, "sigma_min_table", lambda *a, **k: [{"d_qk": 4, "sigma_min_attn": float("nan")}])
    code, out, err = run_main(capsys, "rank-collapse", "--json")
    assert code == 2 and out == "" and "error" in err


def test_interrupt_exits_130_with_one_line(capsys, monkeypatch):
    import convres.cli as cli

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "sigma_min_table", interrupted)
    code, out, err = run_main(capsys, "rank-collapse")
    assert code == 130 and err.strip() == "convres rank-collapse: interrupted; nothing was cached"


def test_allocator_failure_is_one_line(capsys, monkeypatch):
    import convres.cli as cli

    def oom(*a, **k):
        raise RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                           "8 GB")
    monkeypatch.setattr(cli, "sigma_min_table", oom)
    code, _, err = run_main(capsys, "rank-collapse")
    assert code == 2 and "out of memory" in err and len(err.strip().splitlines()) == 1


def test_bench_runs_the_script(capsys):
    code, out, _ = run_main(capsys, "bench", "--profile", "tiny", "--json")
    assert code == 0 and {r["size"] for r in json.loads(out)["rows"]} == {"theorem", "jena"}
    code, _, err = run_main(capsys, "bench", "--threads", "100000")
    assert code == 2 and "--threads" in err
