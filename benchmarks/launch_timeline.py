"""When each program of the one launch (passes 4 and 5, sparsegdn/triton/state_output.py) ran, on the GPU.

    python benchmarks/launch_timeline.py [--tokens 32768 ...] [--variants baseline separate ...] [--out FILE]

With state_output.TIMELINE on, every program of the launch writes when it began and ended (the GPU's
nanosecond timer), its multiprocessor and its role. This script runs the backend entry on the benchmark's
inputs (benchmarks/kernel_bench.py: budget 0.29, band 1, `score`), warm, once more with the timeline on, and
prints per length:
- the launch's span, the chain programs' (first and last end, per-commit time of the long chains) and
  the output programs' (median and 90th percentile time, apart for chunks that start from a zero state
  and those that read a snapshot);
- how many long chains shared a multiprocessor with another long chain while both ran (the chain runs
  ~1.5x slower inside the one launch than alone: kernel_bench.notes.md, 2026-12-01 afternoon);
- how many programs ran (began, ended or ran on) in each tenth of the span: a throughput profile;
- the chains' and the outputs' summed time over the launch's slots (SMs x the most programs an SM ran at
  once) and their share of the span (slot_fill): near 1, the launch is bound by its total work, and a shorter
  chain alone would not shorten it.
Variants are config_probe's (benchmarks/config_probe.py VARIANTS; those of the two launches have no timeline).
The recording adds two timer reads and one store a program, and compiles to slightly different code (the one
launch's default config: 70 local-memory instructions against 62 without it, compile_report, 2026-12-01): read its
span beside config_probe's timing of the same variant, not as a timing of its own.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

LONG_CHAIN = 16          # commits: a chain at least this long counts as long


def output_programs(n_outputs, *, batch, heads, n_chunks, value_blocks):
    """(b, hv, c) of each output ticket in order, as state_output_kernel maps them (value blocks fastest, then
    head pairs, batch rows, chunks)."""
    places = []
    for pid in range(n_outputs):
        rest = pid // value_blocks
        places.append(((rest // heads) % batch, rest % heads, rest // (heads * batch)))
    return places


def summarize(records, events, *, state_bv, value_dim, value_blocks, has_initial=False):
    """A dict of what the timeline says. records: [begin ns, end ns, SM, role] per ticket (rows of -1 past the grid
    dropped here); events: bool [B][HV][NC] (nested lists) of the call."""
    records = [row for row in records if row[0] >= 0]
    batch, heads, n_chunks = len(events), len(events[0]), len(events[0][0])
    chain_blocks = -(-value_dim // state_bv)
    chains = [row for row in records if row[3] == 0]
    outputs = [row for row in records if row[3] == 1]
    start = min(row[0] for row in records)
    end = max(row[1] for row in records)
    counts = [sum(events[b][h]) for b in range(batch) for h in range(heads)]

    long_chains = []
    for ticket, row in enumerate(chains):
        count = counts[ticket // chain_blocks] if ticket // chain_blocks < len(counts) else 0
        if count >= LONG_CHAIN:
            long_chains.append({"ticket": ticket, "commits": count, "sm": row[2], "begin_us": (row[0] - start) / 1e3,
                                "end_us": (row[1] - start) / 1e3, "us_per_commit": (row[1] - row[0]) / 1e3 / count})
    by_sm = {}
    for ticket, row in enumerate(records):
        by_sm.setdefault(row[2], []).append((ticket, row))
    for chain in long_chains:
        chain["shared_sm_with"] = sum(1 for other in long_chains if other is not chain and other["sm"] == chain["sm"]
                                      and other["begin_us"] < chain["end_us"] and chain["begin_us"] < other["end_us"])
        # How many other programs ran beside it on its SM, on average over its life (time-weighted).
        begin, stop = start + chain["begin_us"] * 1e3, start + chain["end_us"] * 1e3
        overlap = sum(max(0, min(stop, row[1]) - max(begin, row[0])) for ticket, row in by_sm[chain["sm"]]
                      if ticket != chain["ticket"])
        chain["neighbours"] = overlap / max(stop - begin, 1)

    places = output_programs(len(outputs), batch=batch, heads=heads, n_chunks=n_chunks, value_blocks=value_blocks)
    first_commit = [[next((c for c, selected in enumerate(row) if selected), n_chunks) for row in rows]
                    for rows in events]
    zero, stateful = [], []
    for (b, h, c), row in zip(places, outputs):     # a chunk after its head pair's first commit reads a state
        (stateful if has_initial or c > first_commit[b][h] else zero).append((row[1] - row[0]) / 1e3)

    def spread(values):
        if not values:
            return None
        ordered = sorted(values)
        return {"programs": len(values), "median_us": statistics.median(ordered),
                "p90_us": ordered[int(0.9 * (len(ordered) - 1))], "max_us": ordered[-1]}

    # Throughput: the programs' summed time over the launch's slots (SMs x the most programs one SM ran at once).
    # A fill near 1 says the launch is bound by its total work, not by its longest chain.
    per_sm = max(most_at_once(rows) for rows in by_sm.values())
    slots = len(by_sm) * per_sm
    chain_work = sum(row[1] - row[0] for row in chains) / 1e3
    output_work = sum(row[1] - row[0] for row in outputs) / 1e3
    tenth = (end - start) / 10 or 1
    ran = [sum(1 for row in records if row[0] < start + (i + 1) * tenth and row[1] > start + i * tenth)
           for i in range(10)]
    chain_end = max((row[1] for row in chains), default=start)
    return {"span_us": (end - start) / 1e3, "programs": len(records), "chain_programs": len(chains),
            "last_chain_end_us": (chain_end - start) / 1e3,
            "outputs_ending_after_last_chain": sum(1 for row in outputs if row[1] > chain_end),
            "long_chains": long_chains,
            "long_chains_sharing_an_sm": sum(1 for chain in long_chains if chain["shared_sm_with"]),
            "us_per_commit_median": statistics.median([c["us_per_commit"] for c in long_chains]) if long_chains
            else None,
            "neighbours_median": statistics.median([c["neighbours"] for c in long_chains]) if long_chains else None,
            "outputs_from_zero_state": spread(zero), "outputs_with_state": spread(stateful),
            "programs_by_tenth": ran, "multiprocessors": len({row[2] for row in records}),
            "programs_per_sm_at_once": per_sm, "chain_work_per_slot_us": chain_work / slots,
            "output_work_per_slot_us": output_work / slots,
            "slot_fill": (chain_work + output_work) / slots / max((end - start) / 1e3, 1e-9)}


def most_at_once(rows):
    """The most programs that ran at the same time among rows (ticket, [begin, end, SM, role]) of one SM."""
    marks = sorted([(row[0], 1) for _, row in rows] + [(row[1], -1) for _, row in rows])   # ends before begins
    running = most = 0
    for _, step in marks:
        running += step
        most = max(most, running)
    return most


def text(tokens, variant, summary) -> str:
    """A few lines of the summary for people."""
    lines = [f"{variant} T={tokens}: span {summary['span_us']:.0f} us, {summary['programs']} programs on "
             f"{summary['multiprocessors']} SMs; chains end by {summary['last_chain_end_us']:.0f} us "
             f"({summary['outputs_ending_after_last_chain']} outputs end later)"]
    if summary["long_chains"]:
        lines.append(f"  long chains: {len(summary['long_chains'])} programs, median "
                     f"{summary['us_per_commit_median']:.2f} us a commit, {summary['long_chains_sharing_an_sm']} "
                     "shared an SM with another long chain while both ran; other programs beside one, on average "
                     f"over its life: median {summary['neighbours_median']:.2f}")
    for name in ("outputs_from_zero_state", "outputs_with_state"):
        part = summary[name]
        if part:
            lines.append(f"  {name.replace('_', ' ')}: {part['programs']} programs, median {part['median_us']:.1f} "
                         f"us, p90 {part['p90_us']:.1f}, max {part['max_us']:.1f}")
    lines.append(f"  work over the launch's slots ({summary['multiprocessors']} SMs x "
                 f"{summary['programs_per_sm_at_once']} programs at once): chains "
                 f"{summary['chain_work_per_slot_us']:.0f} us + outputs {summary['output_work_per_slot_us']:.0f} us, "
                 f"{summary['slot_fill']:.0%} of the span")
    lines.append("  programs that ran in each tenth of the span: " + " ".join(map(str, summary["programs_by_tenth"])))
    return "\n".join(lines)


def run(tokens, variant):
    import torch
    import config_probe
    import kernel_bench
    from sparsegdn import SparseConfig
    from sparsegdn.triton import forward, state_output

    unset = config_probe.unset_settings(variant)
    if unset:            # read at import or compile time: start this process with the setting
        raise SystemExit(f"{variant} needs {unset} in this process's environment")
    config_probe.apply_variant(variant)
    if not forward.OVERLAP or forward.LISTS_FROM:      # config_probe's variants set LISTS_FROM 0 but default-lists
        raise SystemExit(f"{variant}: two launches, no timeline (state_output.TIMELINE is the one launch's)")
    if state_output.READY_ORDER or forward.COMMIT_SEGMENT:     # tickets map otherwise: summarize does not read them
        raise SystemExit(f"{variant}: outputs in readiness order or chains in segments: not summarized here")
    inputs = kernel_bench.make_inputs(tokens)
    config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")
    design = (forward.STORE_INVERSE, forward.COMMIT_SEGMENT)
    kernel_bench.set_design(design)
    state_output.TIMELINE = True
    try:
        for _ in range(3):              # compile and tune with the timeline on, then the recorded call
            result = kernel_bench.backend_entry(inputs, config)
        torch.cuda.synchronize()
    finally:
        state_output.TIMELINE = False
    events = result[2].cpu().tolist()
    best = state_output.state_output_kernel.best_config.kwargs
    value_dim = inputs[2].shape[-1]
    summary = summarize(state_output.last_timeline.cpu().tolist(), events, state_bv=best["STATE_BV"],
                        value_dim=value_dim, value_blocks=-(-value_dim // best["BV"]))
    summary.update(tokens=tokens, variant=variant, config=best)
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[32768])
    parser.add_argument("--variants", nargs="+", default=["baseline"])
    parser.add_argument("--out", type=Path, default=None, help="write every summary here as JSON")
    args = parser.parse_args()
    summaries = []
    for tokens in args.tokens:
        for variant in args.variants:
            summary = run(tokens, variant)
            summaries.append(summary)
            print(text(tokens, variant, summary), flush=True)
    if args.out:
        args.out.write_text(json.dumps(summaries, indent=1))


if __name__ == "__main__":
    main()
