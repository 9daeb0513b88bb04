"""How much of the GPU each contender's call occupies, kernel by kernel: its multiprocessor time (issue 14).

    # on a GPU machine, per contender (a process for ncu: one warm call profiled between cudaProfilerStart/Stop)
    ncu --profile-from-start off --csv --print-units base --metrics $(python benchmarks/sm_ledger.py --metrics) \
        --log-file OUT/sparsegdn.csv python benchmarks/sm_ledger.py run sparsegdn --tokens 131072
    # anywhere: the ledger of the CSV files ncu wrote
    python benchmarks/sm_ledger.py ledger OUT/sparsegdn.csv OUT/flashqla.csv [--json OUT/sm_ledger.json]

A call's time is bounded below by its longest dependent chain and by its total work spread over the GPU. The second
is what this measures: for every kernel of the call, the multiprocessor cycles in which it had a warp resident
(`sm__cycles_active.sum`, summed over the multiprocessors), in milliseconds at the clock ncu ran it at, and that sum
over the call divided by the number of multiprocessors: the time the call would take if its kernels filled the GPU
perfectly (`packed_ms`). If the sparse call's packed time is above a dense contender's whole call, no overlap or
scheduling of the same kernels can beat it; the kernels' own work must shrink.

ncu serializes the kernels and locks the clocks to base (its default), so durations read longer than in a timed run;
the cycles are the comparable figure, and every contender is profiled the same way. The sparse call is profiled as
the public call runs on the front page's inputs (kernel_bench.make_inputs, budget 0.29, band 1, `score`), on its
default route. Under ncu's serialization the Gluon lists beside the chain pass start after it has ended, so their
waits on its progress find it complete (list_output.OVERLAP_LISTS: chains wait on nothing); each kernel's work is
the same as beside it. Run it under `timeout`: batch 29's one ncu try on that route lost its machine (cause unknown).
"""
import argparse
import csv
import json
import os
import sys
from pathlib import Path

METRICS = ("gpu__time_duration.sum", "sm__cycles_active.sum", "sm__cycles_elapsed.avg.per_second",
           "device__attribute_multiprocessor_count")
CONTENDERS = ("sparsegdn", "fla", "flashqla")


def run(contender: str, tokens: int) -> None:
    """Two warm calls of `contender` on kernel_bench's inputs, then one between cudaProfilerStart and Stop."""
    os.environ.setdefault("FLA_FLASH_QLA", "0")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch
    import kernel_bench
    from sparsegdn import SparseConfig
    inputs = kernel_bench.make_inputs(tokens)
    if contender == "sparsegdn":
        config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")

        def call():
            return kernel_bench.public_call(inputs, config)
    else:
        call = kernel_bench.contenders(inputs).get(contender)
        if call is None:
            raise SystemExit(f"{contender} does not import here (kernel_bench.contenders printed why)")
    for _ in range(2):
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"{contender} at {tokens} tokens: one call profiled", flush=True)


def number(text: str) -> float:
    """A metric value as ncu's CSV writes it (thousands separators possible)."""
    return float(text.replace(",", ""))


def read_csv(path: Path) -> list[dict]:
    """Per kernel launch (ncu's ID): its name and METRICS, from ncu's --csv output (lines before the header, ncu's own
    log lines, skipped)."""
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError(f"{path}: no ncu CSV header (a line starting with \"ID\")")
    launches = {}
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") not in METRICS:
            continue
        launch = launches.setdefault(row["ID"], {"kernel": row["Kernel Name"]})
        launch[row["Metric Name"]] = number(row["Metric Value"])
    missing = [(launch["kernel"], name) for launch in launches.values() for name in METRICS if name not in launch]
    if missing:
        raise ValueError(f"{path}: metrics missing for {missing[:3]} (was ncu run with --metrics "
                         f"{','.join(METRICS)}?)")
    return list(launches.values())


def ledger(launches: list[dict]) -> dict:
    """Per kernel name (launches summed, longest SM time first) and for the whole call: duration ms, SM-active ms
    (cycles over the clock), and the call's packed time (SM-active ms over the multiprocessors)."""
    kernels = {}
    for launch in launches:
        entry = kernels.setdefault(launch["kernel"], {"kernel": launch["kernel"], "launches": 0, "duration_ms": 0.0,
                                                      "sm_active_ms": 0.0})
        entry["launches"] += 1
        entry["duration_ms"] += launch["gpu__time_duration.sum"] * 1e-6           # ns in base units
        entry["sm_active_ms"] += 1e3 * launch["sm__cycles_active.sum"] / launch["sm__cycles_elapsed.avg.per_second"]
    sms = {launch["device__attribute_multiprocessor_count"] for launch in launches}
    if len(sms) != 1:
        raise ValueError(f"launches from devices with different multiprocessor counts: {sorted(sms)}")
    count = int(sms.pop())
    rows = sorted(kernels.values(), key=lambda k: -k["sm_active_ms"])
    total = sum(k["sm_active_ms"] for k in rows)
    return {"kernels": rows, "duration_ms": sum(k["duration_ms"] for k in rows), "sm_active_ms": total,
            "multiprocessors": count, "packed_ms": total / count}


def render(name: str, table: dict) -> str:
    lines = [f"{name}: {len(table['kernels'])} kernels, serialized duration {table['duration_ms']:.3f} ms, "
             f"SM-active {table['sm_active_ms']:.1f} SM-ms over {table['multiprocessors']} multiprocessors: "
             f"packed {table['packed_ms']:.3f} ms"]
    for k in table["kernels"]:
        lines.append(f"  {k['sm_active_ms']:9.2f} SM-ms  {k['duration_ms']:8.3f} ms  x{k['launches']:<3d} "
                     f"{k['kernel'][:90]}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--metrics", action="store_true", help="print the --metrics list ncu needs, and exit")
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("run", help="call a contender under ncu (on a GPU)")
    one.add_argument("contender", choices=CONTENDERS)
    one.add_argument("--tokens", type=int, default=131072)
    many = sub.add_parser("ledger", help="the ledger of ncu CSV files (anywhere)")
    many.add_argument("csv", type=Path, nargs="+")
    many.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.metrics:
        print(",".join(METRICS))
    elif args.command == "run":
        run(args.contender, args.tokens)
    elif args.command == "ledger":
        tables, unread = {}, []
        for path in args.csv:          # one run that failed (its CSV without rows) does not hide the others
            try:
                tables[path.stem] = ledger(read_csv(path))
            except (OSError, ValueError) as error:
                unread.append(f"{path}: {error}")
        for name, table in tables.items():
            print(render(name, table))
        if args.json is not None:
            args.json.write_text(json.dumps(tables, indent=1))
        if unread:
            raise SystemExit("not read:\n" + "\n".join(unread))
    else:
        parser.error("say run or ledger (or --metrics)")


if __name__ == "__main__":
    main()
