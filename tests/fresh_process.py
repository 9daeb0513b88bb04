"""Code run in a fresh Python process from the project root, for the settings the library reads at import."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_fresh(code: str, **settings) -> subprocess.CompletedProcess:
    """`code` run in a fresh process (settings are read at import) with only these SPARSEGDN_ settings, CPU only:
    the caller's own SPARSEGDN_ environment is left out."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPARSEGDN_")}
    env.update({f"SPARSEGDN_{name}": str(value) for name, value in settings.items()})
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)
