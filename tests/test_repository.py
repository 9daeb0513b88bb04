"""The repository stands alone: no tracked file points outside it, every relative link resolves in a clone, and the
GPU scripts import on a machine without the app's stack."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(r"\.\./shared|shared/SPEC|\bSPEC\b")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def tracked_text_files() -> list[Path]:
    try:
        names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = []
    for name in names.splitlines():
        path = ROOT / name
        if path.suffix in (".py", ".md", ".toml", ".txt", ".json", ".yml", "") and path.is_file() \
                and path.stat().st_size < 2_000_000:
            files.append(path)
    return files


def test_no_tracked_file_refers_to_the_contract_outside_the_repository():
    offenders = []
    for path in tracked_text_files():
        name = str(path.relative_to(ROOT))
        if path == Path(__file__):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        offenders += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not offenders, f"files that point outside the repository (use docs/CONTRACT.md): {offenders}"


def test_every_relative_markdown_link_resolves_inside_the_repository():
    broken = []
    for path in tracked_text_files():
        if path.suffix != ".md":
            continue
        for target in LINK.findall(path.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target):        # http:, https:, mailto:
                continue
            resolved = (path.parent / target).resolve()
            if ROOT not in resolved.parents and resolved != ROOT or not resolved.exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not broken, broken


# The scripts the GPU runbook runs on a machine that has torch and triton (and FLA, FlashQLA where carried) but not
# the app's stack: importing one must not need polars, streamlit or plotly (batch 20 lost a run to that).
GPU_SCRIPTS = ["kernel_bench", "call_gaps", "warm_up_error", "config_probe", "profile_call", "public_call_probe",
               "launch_timeline", "pair_check", "variant_call", "multi_gpu_run", "compile_report", "host_path",
               "flashqla_cp_study", "gluon_probe"]


@pytest.mark.parametrize("script", GPU_SCRIPTS)
def test_gpu_scripts_import_without_the_app_stack(script):
    code = ("import sys\n"
            "for name in ('polars', 'streamlit', 'plotly'):\n"
            "    sys.modules[name] = None\n"
            f"sys.path[:0] = [{str(ROOT / 'benchmarks')!r}, {str(ROOT)!r}]\n"
            f"import {script}\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
