"""kernel_bench's designs `process`, `whole_chains` and `lists_any_length` and its refusals (batch 29: runs started
with SPARSEGDN_COMMIT_SEGMENT that named by_band alone timed whole chains under a command naming the segments), and
the CPU side of the route probes beside it (route_timelines.idle_us, route_shapes.parse_shape)."""
from fresh_process import run_fresh as bench

IMPORT = "import sys; sys.path.insert(0, 'benchmarks'); import kernel_bench as b; "


DESIGN = (IMPORT + "b.set_design(b.DESIGNS['process']); print(b.forward.COMMIT_SEGMENT, "
          "b.segments_unused(['by_band']) is None, b.segments_unused(['by_band', 'process']) is None); "
          "b.set_design(b.DESIGNS['by_band']); print(b.forward.COMMIT_SEGMENT)")


def test_the_process_design_walks_the_process_segments_and_by_band_alone_is_refused():
    done = bench(DESIGN, COMMIT_SEGMENT=256)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["256", "False", "True", "0"]


def test_without_segments_every_design_list_is_accepted():
    """No SPARSEGDN_ segment setting: the lists' default segments (`half`) are every design's that leaves them alone,
    so a run of whole-chain designs only is no mistake and is accepted."""
    done = bench(DESIGN + "; print(b.forward.LISTS_SEGMENT, b.segments_unused(['whole_chains']) is None, "
                 "b.segments_unused(['one_launch', 'lists_overlap']) is None)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "True", "True", "0", "half", "True", "True"]


def test_the_command_line_refuses_segments_no_design_takes():
    done = bench("import runpy, sys; sys.argv = ['kernel_bench.py', '--designs', 'by_band', '--tokens', '4096']; "
                 "runpy.run_path('benchmarks/kernel_bench.py', run_name='__main__')", COMMIT_SEGMENT=512)
    assert done.returncode != 0
    assert "SPARSEGDN_COMMIT_SEGMENT=512 is set" in done.stderr and "--designs process" in done.stderr


def test_whole_chains_is_the_baseline_beside_the_lists_segments():
    """In a process started with SPARSEGDN_LISTS_SEGMENT, by_band walks the lists' segments and whole_chains the
    whole chains; by_band after it puts the segments back. The segments beside the lists need no `process` design."""
    done = bench(IMPORT + "seen = [(b.set_design(b.DESIGNS[name]), b.forward.LISTS_SEGMENT)[1] for name in "
                 "('by_band', 'whole_chains', 'by_band')]; print(*seen, b.segments_unused(['by_band']) is None)",
                 LISTS_SEGMENT=512)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["512", "0", "512", "True"]


def test_a_process_with_lists_segments_and_only_whole_chain_designs_is_refused():
    """SPARSEGDN_LISTS_SEGMENT with designs that all walk whole chains (WHOLE_BESIDE_LISTS) is refused; one design that
    walks the lists' segments is enough."""
    done = bench(IMPORT + "asked = (['whole_chains'], ['one_launch', 'lists_overlap'], ['whole_chains', 'by_band'], "
                 "['transposed']); print(*(b.segments_unused(designs) is None for designs in asked))",
                 LISTS_SEGMENT=256)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "True", "True"]


def test_lists_any_length_lifts_the_length_conditions_and_by_band_puts_them_back():
    """kernel_bench's `lists_any_length`: the lists' route at every length and row count (forward.LISTS_FROM and
    LISTS_MIN_ROW_CHUNKS at 1, LISTS_MIN_ROWS 0, the budget's condition kept); the next design without its tag
    restores the defaults."""
    done = bench(IMPORT + "f = b.forward; seen = [(b.set_design(b.DESIGNS[name]), "
                 "(f.LISTS_FROM, f.LISTS_MIN_ROW_CHUNKS, f.LISTS_MIN_ROWS, "
                 "f.LISTS_MAX_BUDGET))[1] for name in ('by_band', 'lists_any_length', 'one_launch', "
                 "'lists_any_length', 'by_band')]; print(*(' '.join(map(str, s)) for s in seen))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2048", "64", "32", "0.5", "1", "1", "0", "0.5", "0", "64", "32", "0.5",
                                   "1", "1", "0", "0.5", "2048", "64", "32", "0.5"]


def test_route_timelines_idle_time_is_the_span_without_any_kernel():
    """route_timelines.idle_us: overlapping kernels count once, gaps between them are idle."""
    done = bench("import sys; sys.path.insert(0, 'benchmarks'); from route_timelines import idle_us; "
                 "print(idle_us([['a', 0, 10], ['b', 5, 10], ['c', 20, 5], ['d', 21, 2]]), idle_us([]))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["5.0", "0.0"]


def test_route_shapes_reads_shapes_and_refuses_bad_ones():
    """route_shapes.parse_shape: BxHxHVxT, four positive ints with HV a multiple of H; every shape is parsed before any
    GPU work, so a typo costs no device time."""
    done = bench("import sys; sys.path.insert(0, 'benchmarks'); from route_shapes import parse_shape, SHAPES\n"
                 "print(*parse_shape('2x16x32x4096'), all(parse_shape(s) for s in SHAPES))\n"
                 "for bad in ('2x16x32', '2x16x24x4096', '0x16x32x4096', '2x16x32x4k'):\n"
                 "    try:\n        parse_shape(bad)\n    except ValueError as error:\n        print('refused', bad)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["2 16 32 4096 True", "refused 2x16x32", "refused 2x16x24x4096",
                                        "refused 0x16x32x4096", "refused 2x16x32x4k"]
