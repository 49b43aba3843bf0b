"""The command line."""

import json
import subprocess
import sys

import pytest

from convres import __version__
from convres.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "convres", *args], capture_output=True, text=True)


def test_help_lists_subcommands():
    out = run("--help")
    assert out.returncode == 0 and "gd" in out.stdout


def test_version():
    out = run("--version")
    assert out.returncode == 0 and __version__ in out.stdout


def test_gd_json(capsys):
    assert main(["gd", "--steps", "20", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["steps"] == 20 and result["final_loss"] < result["initial_loss"]


def test_bad_argument_gives_a_clear_error():
    out = run("gd", "--mu", "-1")
    assert out.returncode == 2 and "--mu: must be a finite number > 0" in out.stderr
    out = run("gd", "--activation", "nope")
    assert out.returncode == 2 and "invalid choice: 'nope'" in out.stderr and "Traceback" not in out.stderr


def test_gd_activation_choices_match_the_model():
    from convres.cli import build_parser
    from convres.model import ACTIVATIONS
    gd = build_parser()._subparsers._group_actions[0].choices["gd"]
    (action,) = [a for a in gd._actions if a.dest == "activation"]
    assert tuple(action.choices) == tuple(sorted(ACTIVATIONS))


def test_nan_and_negative_seed_are_rejected_clearly():
    out = run("gd", "--beta", "nan")
    assert out.returncode == 2 and "finite number >= 0" in out.stderr
    out = run("gd", "--seed", "-1")
    assert out.returncode == 2 and "integer >= 0" in out.stderr


def test_output_closed_early_is_not_a_traceback():
    import subprocess, sys
    p = subprocess.run(f"'{sys.executable}' -m convres gd --steps 5 | head -c 1", shell=True,
                       capture_output=True, text=True)
    assert "Traceback" not in p.stderr
