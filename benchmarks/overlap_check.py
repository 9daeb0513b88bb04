"""The output lists beside the chain pass (list_output.OVERLAP_LISTS) against the same lists after it, in one process.

    python benchmarks/overlap_check.py --tokens 32768 131072 [--repeats 3] [--out rows.json]
    python benchmarks/overlap_check.py --summary FOLDER     # one line per row of every run's JSON there, by round

On the kernel benchmark's inputs (B = 1, H = 16, HV = 32, K = V = 128, bf16; budget 0.29, band 1, `score`, final state
returned) the backend entry in the two-launch form with the vectors stored and the Gluon lists writing the outputs, in
four arrangements: Tinv stored by pass 1 or solved by the lists, whole chains or warm-up segments of 256 commits.
Each runs with the lists after the chain pass (serial) and beside it (overlapped). The overlapped call's outputs and
final state must equal the serial call's bit for bit, `repeats` times over: the same kernels and roundings, so a
snapshot read before its chain stored it, or a list that ended before the chains, would show. Then both are timed
(do_bench medians, interleaved, two rounds), with the one launch for scale (the default below forward.LISTS_FROM;
its row key `default_one_launch_ms` is older than the lists' default).
One JSON row per length and arrangement; a mismatch is reported in its row (and the exit status is 1), not hidden.
"""
import argparse
import json
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import kernel_bench  # noqa: E402
from sparsegdn import SparseConfig  # noqa: E402
from sparsegdn.config import num_chunks  # noqa: E402
from sparsegdn.triton import call_plans, forward, list_output, state_pass  # noqa: E402

ARRANGEMENTS = {"stored": (True, 0, 0.0), "solved": (False, 0, 0.0), "stored-warm-up-256": (True, 256, 20.0),
                "solved-warm-up-256": (False, 256, 20.0)}


def arrangement(name, tokens):
    """(store, segment, warm_up) of an arrangement at `tokens`. The whole-chain ones take the lists' own segments of a
    call of that length (forward.LISTS_SEGMENT: by default `half` its chunk count since batch 42;
    SPARSEGDN_LISTS_SEGMENT=0 keeps whole chains) through forward.chain_segments, as the default's route would
    (normalised keys), since the lists are run here by switch (LISTS_FROM 0), a route that reads COMMIT_SEGMENT, not
    LISTS_SEGMENT. Read
    before the first `configure`, which sets WARM_UP. (Batch 40 found the forms of its SPARSEGDN_LISTS_SEGMENT A/B
    identical calls: this was missing.)"""
    store, segment, warm_up = ARRANGEMENTS[name]
    if segment == 0 and forward.LISTS_SEGMENT:
        segment, warm_up = forward.chain_segments(True, True, num_chunks(tokens))
    return store, segment, warm_up


def configure(store, segment, warm_up, overlap, lists=True):
    """The module switches forward reads at call time: the two launches with the lists (or the one launch, which long
    calls at budget 0.29 leave by default since batch 25: LISTS_FROM 0 keeps them on it)."""
    forward.OVERLAP = not lists
    forward.LISTS_FROM = 0
    forward.STORE_VECTORS = lists
    forward.STORE_INVERSE = store if lists else None
    forward.COMMIT_SEGMENT, forward.WARM_UP = segment, warm_up
    list_output.LIST_OUTPUTS = lists
    list_output.OVERLAP_LISTS = overlap


def host_issue_ms(call, calls=20):
    """Median wall time the host takes to issue one call (no sync inside it; the GPU drained before each): how long
    its Python and launches take, whatever the GPU does meanwhile."""
    import statistics
    import time
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        begin = time.perf_counter()
        call()
        times.append((time.perf_counter() - begin) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def kernel_timeline(call):
    """[name, start us, duration us] of each kernel of one call (the third of three, warm) on the GPU's timeline,
    from the call's first kernel: kernels that overlap show as such."""
    from torch.profiler import ProfilerActivity, profile
    call()
    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    kernels = [event for event in prof.events() if event.device_type == torch.autograd.DeviceType.CUDA
               and event.time_range.elapsed_us() > 0]
    kernels.sort(key=lambda event: event.time_range.start)
    origin = kernels[0].time_range.start if kernels else 0
    return [[event.name[:60], round(event.time_range.start - origin, 1), round(event.time_range.elapsed_us(), 1)]
            for event in kernels]


def summary(folder: Path) -> list[str]:
    """One line per row of each `--out` JSON in `folder` (a batch script's runs, named <form>-round<N>.json): the public
    call's time, the fastest overlapped and serial samples and whether they were equal bit for bit, round by round;
    where a row has the kernels' timeline (--profile), the chain pass's time and when the last list ended, from the
    chains' start; then each form's public call over its rounds (mean, fastest, slowest) by length."""
    lines, by_form = [], {}
    def round_of(path):
        number = path.stem.rsplit("-round", 1)[-1]
        return (int(number) if number.isdigit() else 0, path.stem)
    for path in sorted(folder.glob("*.json"), key=round_of):
        for row in json.loads(path.read_text()):
            line = (f"{path.stem:28s} T={row['T']:6d} public {row['overlapped_public_ms']:.3f} ms  overlapped "
                    f"{min(row['overlapped_ms']):.3f}  serial {min(row['serial_ms']):.3f}  equal {row['bit_equal']}")
            kernels = row.get("overlapped_kernels") or []
            chains = [k for k in kernels if k[0].startswith("state_pass")]
            lists = [k for k in kernels if k[0].startswith("list_output")]
            if chains and lists:
                line += (f"  chains {sum(k[2] for k in chains):.0f} us, lists end "
                         f"{max(k[1] + k[2] for k in lists) - chains[0][1]:.0f} us after they begin")
            lines.append(line)
            by_form.setdefault((path.stem.rsplit("-round", 1)[0], row["T"]), []).append(row["overlapped_public_ms"])
    if by_form:
        lines.append("form                          T       public ms: mean  fastest  slowest  rounds")
    for (form, tokens), times in sorted(by_form.items(), key=lambda item: (item[0][1], item[0][0])):
        lines.append(f"{form:28s} {tokens:7d}  {sum(times) / len(times):10.3f} {min(times):8.3f} {max(times):8.3f}  "
                     f"{len(times):6d}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="+", default=list(ARRANGEMENTS), choices=list(ARRANGEMENTS))
    parser.add_argument("--chain-stages", type=int, default=None,
                        help="state_pass.PROGRESS_STAGES for the overlapped calls (this process's first setting)")
    parser.add_argument("--claim", action="store_true",
                        help="list_output.CLAIM on in both arrangements: each list program claims its next chunk")
    parser.add_argument("--own-launch", type=int, nargs=2, default=None, metavar=("STAGES", "PER_SM"),
                        help="list_output.OWN_LAUNCH: the zero-state list's stages and programs an SM")
    parser.add_argument("--state-launch", type=int, nargs=2, default=None, metavar=("STAGES", "PER_SM"),
                        help="list_output.STATE_LAUNCH (one stage when overlapped: its waits come before the loads)")
    parser.add_argument("--list-maxnreg", type=int, nargs=2, default=None, metavar=("OWN", "STATE"),
                        help="list_output.LIST_MAXNREG: each list's register cap (0: none)")
    parser.add_argument("--profile", action="store_true",
                        help="also each call's kernels on the GPU's timeline (torch.profiler), serial and overlapped")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--summary", type=Path, metavar="FOLDER", help="print the runs' rows in FOLDER and exit")
    args = parser.parse_args()
    if args.summary:
        print("\n".join(summary(args.summary)))
        return 0
    list_output.CLAIM = args.claim
    if args.own_launch:
        list_output.OWN_LAUNCH = tuple(args.own_launch)
    if args.state_launch:
        list_output.STATE_LAUNCH = tuple(args.state_launch)
    if args.list_maxnreg:
        list_output.LIST_MAXNREG = list_output._register_caps(",".join(map(str, args.list_maxnreg)))
    if args.chain_stages is not None:
        state_pass.PROGRESS_STAGES = args.chain_stages
    config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")
    calls = []
    real_call = list_output.ListCall

    def spy(*positional, **keywords):
        made = real_call(*positional, **keywords)
        calls.append(made.overlap)
        return made
    list_output.ListCall = spy
    rows, failed = [], False
    for tokens in args.tokens:
        arrangements = {name: arrangement(name, tokens) for name in args.only}
        inputs = kernel_bench.make_inputs(tokens)
        entry = lambda: kernel_bench.backend_entry(inputs, config)  # noqa: E731
        configure(None, 0, 0.0, False, lists=False)
        entry()
        torch.cuda.synchronize()
        default_ms = triton.testing.do_bench(entry, warmup=25, rep=100, return_mode="median")
        for name in args.only:
            store, segment, warm_up = arrangements[name]
            row = {"T": tokens, "arrangement": name, "segment": segment, "warm_up": warm_up,
                   "default_one_launch_ms": default_ms,
                   "chain_stages": state_pass.PROGRESS_STAGES, "chain_bv": state_pass.PROGRESS_BV,
                   "chain_maxnreg": state_pass.CHAIN_MAXNREG, "chain_publish": state_pass.PROGRESS_PUBLISH,
                   "claim": args.claim,
                   "own_launch": list_output.OWN_LAUNCH, "state_launch": list_output.STATE_LAUNCH,
                   "list_maxnreg": list_output.LIST_MAXNREG}
            configure(store, segment, warm_up, False)
            calls.clear()
            call_plans.clear()          # each arrangement's first calls launched (and recorded): ListCall runs
            serial = entry()
            torch.cuda.synchronize()
            o_serial, s_serial, flags_serial = serial[0].clone(), serial[1].clone(), serial[-1].clone()
            configure(store, segment, warm_up, True)
            mismatches = []
            for repeat in range(args.repeats):
                o, s, *_, flags = entry()
                torch.cuda.synchronize()
                if not (torch.equal(o, o_serial) and torch.equal(s, s_serial) and torch.equal(flags, flags_serial)):
                    difference = (o.float() - o_serial.float()).abs()
                    mismatches.append({"repeat": repeat, "o_max_abs": float(difference.nan_to_num(1e30).max()),
                                       "o_nan": int(torch.isnan(o).sum()),
                                       "s_max_abs": float((s - s_serial).abs().nan_to_num(1e30).max()),
                                       "flags": flags.tolist()})
            # the lists ran serial and overlapped (a call replayed from its key's launch plan makes no ListCall)
            row["lists_ran"] = calls[:1] == [False] and True in calls[1:] and False not in calls[1:]
            row["bit_equal"] = not mismatches
            row["mismatches"] = mismatches
            failed |= bool(mismatches) or not row["lists_ran"]
            for label in ("serial_ms", "overlapped_ms"):
                row[label] = []
            for _ in range(2):                          # interleaved: serial, overlapped, serial, overlapped
                for overlap, label in ((False, "serial_ms"), (True, "overlapped_ms")):
                    configure(store, segment, warm_up, overlap)
                    row[label].append(triton.testing.do_bench(entry, warmup=25, rep=100, return_mode="median"))
            for overlap, label in ((False, "serial"), (True, "overlapped")):   # the host's side of a call
                configure(store, segment, warm_up, overlap)
                row[label + "_host_issue_ms"] = host_issue_ms(entry)
                row[label + "_public_ms"] = triton.testing.do_bench(
                    lambda: kernel_bench.public_call(inputs, config), warmup=25, rep=100, return_mode="median")
            if args.profile:
                for overlap, label in ((False, "serial_kernels"), (True, "overlapped_kernels")):
                    configure(store, segment, warm_up, overlap)
                    row[label] = kernel_timeline(entry)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
