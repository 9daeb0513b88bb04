"""Write the README's result tables from the committed result files (analysis/measurements.py renders them).

    python -m analysis.front_page            # rewrite README.md's generated tables
    python -m analysis.front_page --check    # exit 1 when README.md differs from what the files render

A table sits between `<!-- generated from analysis/results/NAME -->` and `<!-- end generated -->`;
everything between the two lines is replaced by the rendering of NAME, so a new result file flows into
the README without hand edits, and a figure the files do not back cannot stay there.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from . import measurements

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(?P<open><!-- generated from analysis/results/(?P<name>[\w.-]+) -->\n)(?P<body>.*?)"
                   r"(?P<close><!-- end generated -->)", re.S)


def render(name: str, results_dir: Path = measurements.RESULTS_DIR) -> str:
    """The table of one committed result file, by the kind its name says."""
    path = results_dir / name
    if name.startswith("kernel_bench"):
        return measurements.kernel_table(measurements.kernel_bench(path), name)
    if name.startswith("flashqla_cp_study"):
        return measurements.cp_study_table(*measurements.cp_study(path), name)
    if name.startswith("prefill"):
        return measurements.prefill_table(*measurements.prefill(path), name)
    if name.startswith("selector_eval"):
        return measurements.selector_table(*measurements.selector_errors(path), name)
    if name.startswith("cpu_core_bench"):
        return measurements.cpu_core_table(*measurements.cpu_core(path), name)
    if name.startswith("app_run"):
        return measurements.app_run_table(*measurements.app_runs(path), name)
    if name.startswith("multi_gpu_run"):
        return f"`{name}`: " + measurements.multi_gpu_report(json.loads(path.read_text(encoding="utf-8")))
    if name.startswith("gdn_only_eval"):      # the CPU cross-check of the default model's evaluation
        return measurements.cross_check_table(path, name, results_dir / measurements.CROSS_CHECK_REFERENCE)
    if name.startswith("ruler"):
        return measurements.evaluation_table(path, name, trained_log=measurements.DEFAULT_TRAIN_LOG)
    raise ValueError(f"{name}: no table is rendered from this kind of result file")


def rewrite(text: str, results_dir: Path = measurements.RESULTS_DIR) -> str:
    """`text` with every generated block replaced by the rendering of the file it names."""
    return BLOCK.sub(lambda m: m["open"] + render(m["name"], results_dir) + "\n" + m["close"], text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when README.md is stale")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    fresh = rewrite(text)
    if args.check:
        if fresh != text:
            print("README.md's generated tables differ from analysis/results/: run python -m analysis.front_page",
                  file=sys.stderr)
            return 1
        return 0
    README.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
