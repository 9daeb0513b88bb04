"""benchmarks/sm_ledger.py's reading of ncu's CSV (the profiling itself runs on a GPU only)."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import sm_ledger  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
CLOCK = 1_500_000_000                      # 1.5 GHz: 1.5e6 cycles a millisecond


def rows(launch_id, kernel, duration_ns, active_cycles, warp_cycles, block_size=128, limits=(2, 3, 16, 32),
         clock=CLOCK, sms=132, skip=()):
    """ncu's CSV rows (details page, base units) of one launch; `limits`: the occupancy limits by registers, shared
    memory, warps and blocks."""
    values = {"gpu__time_duration.sum": ("ns", duration_ns), "sm__cycles_active.sum": ("cycle", active_cycles),
              "sm__warps_active.sum": ("warp", warp_cycles), "sm__cycles_elapsed.avg.per_second": ("hz", clock),
              "device__attribute_multiprocessor_count": ("", sms), "launch__block_size": ("", block_size),
              **{name: ("block", limit) for name, limit in zip(sm_ledger.OCCUPANCY_LIMITS, limits)}}
    return [f'"{launch_id}","1","python","host","{kernel}","1","7","({block_size}, 1, 1)","(4, 32, 1)","0","9.0",'
            f'"Command line profiler metrics","{name}","{unit}","{value:,}"'
            for name, (unit, value) in values.items() if name not in skip]


def write(tmp_path, lines, name="sparsegdn.csv"):
    path = tmp_path / name
    path.write_text("\n".join(["==PROF== Connected to process 1", HEADER, *lines, "==PROF== Disconnected"]) + "\n")
    return path


def test_the_ledger_bounds_each_kernels_share_of_the_gpu_and_packs_the_call(tmp_path):
    """SM-active ms (cycles over the clock) is the upper bound; the lower weights each resident block (warp-cycles
    over its warps) by 1 / the blocks a multiprocessor holds (the least of the four limits). Kernels are summed over
    their launches, largest upper bound first; the packed times are the call's sums over the multiprocessors."""
    path = write(tmp_path, rows(0, "intra_chunk_kernel", 200_000, 30_000_000, 240_000_000, limits=(4, 8, 16, 32))
                 + rows(1, "state_pass_kernel", 2_000_000, 60_000_000, 240_000_000, limits=(2, 2, 16, 32))
                 + rows(2, "intra_chunk_kernel", 100_000, 15_000_000, 120_000_000, limits=(4, 8, 16, 32)))
    table = sm_ledger.ledger(sm_ledger.read_csv(path))
    assert [k["kernel"] for k in table["kernels"]] == ["state_pass_kernel", "intra_chunk_kernel"]
    state, intra = table["kernels"]
    # state: 60e6 cycles = 40 SM-ms; 240e6 warp-cycles / 4 warps = 60e6 block-cycles, over 2 blocks: 20 SM-ms
    assert state["sm_active_ms"] == pytest.approx(40.0) and state["share_ms"] == pytest.approx(20.0)
    assert state["launches"] == 1 and state["blocks_per_sm"] == [2]
    # intra: 45e6 cycles = 30 SM-ms; 360e6 / 4 / 4 = 22.5e6 cycles = 15 SM-ms
    assert intra["sm_active_ms"] == pytest.approx(30.0) and intra["share_ms"] == pytest.approx(15.0)
    assert intra["launches"] == 2 and intra["duration_ms"] == pytest.approx(0.3)
    assert table["duration_ms"] == pytest.approx(2.3)
    assert table["packed_ms"] == pytest.approx(70.0 / 132) and table["packed_share_ms"] == pytest.approx(35.0 / 132)
    assert "packed 0.265-0.530 ms" in sm_ledger.render("sparsegdn", table)


def test_units_are_read_from_the_csv_and_an_unknown_one_is_refused(tmp_path):
    """A duration in ncu's short "ns" (what batch 35's ncu wrote), in "nsecond" and in "usecond", and a clock in
    cycles per nanosecond, read as the same figures; a unit the module does not know is an error naming it, not a
    figure off by a power of ten."""
    base = rows(0, "k", 2_000_000, 60_000_000, 240_000_000)
    scaled = [line.replace('"ns","2,000,000"', '"usecond","2,000"').replace('"hz","1,500,000,000"',
                                                                                  '"cycle/nsecond","1.5"')
              for line in base]
    assert scaled != base
    a, b = (sm_ledger.ledger(sm_ledger.read_csv(write(tmp_path, lines, name))) for lines, name in
            ((base, "a.csv"), (scaled, "b.csv")))
    assert b["duration_ms"] == pytest.approx(a["duration_ms"]) and b["packed_ms"] == pytest.approx(a["packed_ms"])
    long_form = [line.replace('"ns"', '"nsecond"') for line in base]
    assert long_form != base
    c = sm_ledger.ledger(sm_ledger.read_csv(write(tmp_path, long_form, "long.csv")))
    assert c["duration_ms"] == pytest.approx(a["duration_ms"]) == pytest.approx(2.0)
    odd = [line.replace('"ns"', '"fortnight"') for line in base]
    with pytest.raises(ValueError, match="fortnight"):
        sm_ledger.read_csv(write(tmp_path, odd, "c.csv"))


def test_a_csv_without_the_metrics_rows_or_header_is_refused(tmp_path):
    partial = rows(0, "k", 1, 2, 3, skip=("sm__warps_active.sum",))
    with pytest.raises(ValueError, match="metrics missing"):
        sm_ledger.read_csv(write(tmp_path, partial))
    with pytest.raises(ValueError, match="no kernel launch"):
        sm_ledger.read_csv(write(tmp_path, [], "empty.csv"))
    (tmp_path / "error.csv").write_text("==ERROR== the application returned an error\n")
    with pytest.raises(ValueError, match="no ncu CSV header"):
        sm_ledger.read_csv(tmp_path / "error.csv")


def test_the_ledger_command_reads_every_file_it_can_and_names_the_others(tmp_path, monkeypatch, capsys):
    good = write(tmp_path, rows(0, "chunk_kernel", 1_000_000, 3_000_000, 12_000_000), name="fla_32768.csv")
    bad = tmp_path / "flashqla_32768.csv"
    bad.write_text("==ERROR== timeout\n")
    out = tmp_path / "ledger.json"
    monkeypatch.setattr(sys, "argv", ["sm_ledger.py", "ledger", str(good), str(bad), "--json", str(out)])
    with pytest.raises(SystemExit, match="flashqla_32768.csv"):
        sm_ledger.main()
    assert "fla_32768: 1 kernels" in capsys.readouterr().out
    assert list(json.loads(out.read_text())) == ["fla_32768"]
