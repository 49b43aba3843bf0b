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
    assert out.returncode == 2 and "--mu: must be > 0" in out.stderr
    out = run("gd", "--activation", "nope")
    assert out.returncode == 2 and "unknown activation" in out.stderr and "Traceback" not in out.stderr
