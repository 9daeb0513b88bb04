"""benchmarks/host_path.py runs on a CPU machine: the entry's host work with every launch a no-op, planned too.
In a process of its own (it swaps every launcher's kernel for a stand-in)."""
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "host_path.py"


def run(*flags):
    done = subprocess.run([sys.executable, str(SCRIPT), "--tokens", "256", "--calls", "3", *flags],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_planned_calls_run_with_their_clear_stubbed():
    # a planned call clears its zeroed parts with a compiled kernel (call_plans.zero_words): the script must stub it
    # as it stubs the launchers, or every planned call tries to compile for a CPU tensor
    out = run("--plans")
    assert "host work of the entry from its plan" in out and " ms a call" in out


def test_launched_calls_run():
    out = run()
    assert "host work of the entry " in out and "from its plan" not in out
