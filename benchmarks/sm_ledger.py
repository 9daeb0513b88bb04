"""How much of the GPU each contender's call occupies, kernel by kernel: its multiprocessor time (issue 14).

    # on a GPU machine, per contender (a process for ncu: one warm call profiled between cudaProfilerStart/Stop)
    ncu --profile-from-start off --clock-control none --csv --print-units base \
        --metrics $(python benchmarks/sm_ledger.py --metrics) \
        --log-file OUT/sparsegdn.csv python benchmarks/sm_ledger.py run sparsegdn --tokens 131072
    # anywhere: the ledger of the CSV files ncu wrote
    python benchmarks/sm_ledger.py ledger OUT/sparsegdn.csv OUT/flashqla.csv [--json OUT/sm_ledger.json]

A call's time is bounded below by its longest dependent chain and by its total work spread over the GPU. The second
is what this measures, per kernel of one warm call, in milliseconds of one multiprocessor (SM-ms):

- `sm_active_ms`: the cycles in which the kernel had a warp resident on a multiprocessor, summed over them
  (`sm__cycles_active.sum`). It charges a kernel the whole multiprocessor even where one of its blocks holds only part
  of it (the chain programs: two fill one's registers): an upper bound of its share.
- `share_ms`: its resident warps' cycles (`sm__warps_active.sum`) in blocks, each weighted by the share of a
  multiprocessor one block holds, 1 / (the blocks a multiprocessor can hold by registers, shared memory, warps and
  its block limit: ncu's `launch__occupancy_limit_*`): a lower bound, the kernel's footprint if other kernels filled
  whatever its blocks leave.

Summed over the call and divided by the multiprocessors, each gives the time the call would take if its kernels
filled the GPU perfectly (`packed_ms` from the upper, `packed_share_ms` from the lower). If even the lower is above a
dense contender's whole call, no schedule of the same kernels beats it: their own work must shrink. If even the upper
is below it, a better schedule could.

ncu serializes the kernels; run it with `--clock-control none` so that the clocks are those of a timed run (ncu locks
them to base by default) and compare contenders within one ledger. The sparse call is profiled as the public call
runs on the front page's inputs (kernel_bench.make_inputs, budget 0.29, band 1, `score`), on its default route.
Under ncu's serialization the Gluon lists beside the chain pass start after it has ended, so their waits on its
progress find it complete (list_output.OVERLAP_LISTS: chains wait on nothing); each kernel's work is the same as
beside it. Run it under `timeout`: batch 29's one ncu try on that route lost its machine (cause unknown).
"""
import argparse
import csv
import json
import os
import sys
from pathlib import Path

# Each metric's unit as ncu's CSV may name it (lower case) and the factor to this module's unit: seconds, cycles a
# second, or the count itself. A unit not listed is refused, not guessed.
TIME = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
        "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}          # ncu 2025 (batch 35's H100) writes "ns"
RATE = {"cycle/second": 1.0, "cycle/usecond": 1e6, "cycle/nsecond": 1e9, "hz": 1.0, "khz": 1e3, "mhz": 1e6,
        "ghz": 1e9}
COUNT = {"": 1.0, "cycle": 1.0, "warp": 1.0, "block": 1.0, "thread": 1.0}
OCCUPANCY_LIMITS = ("launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
                    "launch__occupancy_limit_warps", "launch__occupancy_limit_blocks")
UNITS = {"gpu__time_duration.sum": TIME, "sm__cycles_active.sum": COUNT, "sm__warps_active.sum": COUNT,
         "sm__cycles_elapsed.avg.per_second": RATE, "device__attribute_multiprocessor_count": COUNT,
         "launch__block_size": COUNT, **{name: COUNT for name in OCCUPANCY_LIMITS}}
METRICS = tuple(UNITS)
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


def value(name: str, unit: str, text: str) -> float:
    """A metric's value as ncu's CSV writes it (thousands separators possible), in this module's unit (UNITS)."""
    factors = UNITS[name]
    factor = factors.get(unit.strip().lower())
    if factor is None:
        raise ValueError(f"{name}: unit {unit!r} is not one of {sorted(factors)} (run ncu with --print-units base)")
    return float(text.replace(",", "")) * factor


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
        launch[row["Metric Name"]] = value(row["Metric Name"], row.get("Metric Unit") or "", row["Metric Value"])
    if not launches:
        raise ValueError(f"{path}: no kernel launch with the ledger's metrics (did the profiled call run?)")
    missing = [(launch["kernel"], name) for launch in launches.values() for name in METRICS if name not in launch]
    if missing:
        raise ValueError(f"{path}: metrics missing for {missing[:3]} (was ncu run with --metrics "
                         f"{','.join(METRICS)}?)")
    return list(launches.values())


def ledger(launches: list[dict]) -> dict:
    """Per kernel name (launches summed, largest upper bound first) and for the whole call: duration ms, SM-active ms
    (the upper bound), share ms (the lower bound), and the call's packed times (each over the multiprocessors)."""
    kernels = {}
    for launch in launches:
        entry = kernels.setdefault(launch["kernel"], {"kernel": launch["kernel"], "launches": 0, "duration_ms": 0.0,
                                                      "sm_active_ms": 0.0, "share_ms": 0.0, "blocks_per_sm": set()})
        clock = launch["sm__cycles_elapsed.avg.per_second"]
        blocks_per_sm = min(launch[name] for name in OCCUPANCY_LIMITS)
        warps_per_block = max(1.0, launch["launch__block_size"] / 32)
        entry["launches"] += 1
        entry["duration_ms"] += 1e3 * launch["gpu__time_duration.sum"]
        entry["sm_active_ms"] += 1e3 * launch["sm__cycles_active.sum"] / clock
        entry["share_ms"] += 1e3 * launch["sm__warps_active.sum"] / warps_per_block / max(blocks_per_sm, 1.0) / clock
        entry["blocks_per_sm"].add(int(blocks_per_sm))
    sms = {launch["device__attribute_multiprocessor_count"] for launch in launches}
    if len(sms) != 1:
        raise ValueError(f"launches from devices with different multiprocessor counts: {sorted(sms)}")
    count = int(sms.pop())
    rows = sorted(kernels.values(), key=lambda k: -k["sm_active_ms"])
    for row in rows:
        row["blocks_per_sm"] = sorted(row["blocks_per_sm"])
    upper, lower = sum(k["sm_active_ms"] for k in rows), sum(k["share_ms"] for k in rows)
    return {"kernels": rows, "duration_ms": sum(k["duration_ms"] for k in rows), "sm_active_ms": upper,
            "share_ms": lower, "multiprocessors": count, "packed_ms": upper / count, "packed_share_ms": lower / count}


def render(name: str, table: dict) -> str:
    lines = [f"{name}: {len(table['kernels'])} kernels, serialized {table['duration_ms']:.3f} ms; packed "
             f"{table['packed_share_ms']:.3f}-{table['packed_ms']:.3f} ms ({table['share_ms']:.1f}-"
             f"{table['sm_active_ms']:.1f} SM-ms over {table['multiprocessors']} multiprocessors)"]
    for k in table["kernels"]:
        lines.append(f"  {k['share_ms']:8.2f}-{k['sm_active_ms']:<8.2f} SM-ms  {k['duration_ms']:8.3f} ms  "
                     f"x{k['launches']:<3d} {k['blocks_per_sm']} a multiprocessor  {k['kernel'][:80]}")
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
