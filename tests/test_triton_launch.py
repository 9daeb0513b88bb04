"""The fast launch path (sparsegdn/triton/launch.py): plan keys, argument order, and when Triton is asked.

The real launcher needs a GPU; here a stand-in kernel records what Triton and the compiled kernel would
have been called with, and a stand-in driver names the device and stream.
"""
import pytest
import torch
from triton.runtime import Autotuner

from sparsegdn.triton import launch


def kernel_source(x_ptr, n, scale, BLOCK: "tl.constexpr", FLAG: "tl.constexpr" = 7, GROUP: "tl.constexpr" = 1):
    """The stand-in kernel's signature (never run)."""


class FakeCompiled:
    function, packed_metadata = "function", "metadata"

    def __init__(self):
        self.launches = []

    def run(self, *launch_args):
        self.launches.append(launch_args)


class FakeKernel:
    """Like a triton.jit function: kernel[grid](*args, **constants) launches and returns the compiled kernel."""

    fn = staticmethod(kernel_source)
    arg_names = ["x_ptr", "n", "scale", "BLOCK", "FLAG", "GROUP"]
    constexprs = [3, 4, 5]

    def __init__(self):
        self.compiled = FakeCompiled()
        self.triton_calls = []

    def __getitem__(self, grid):
        def call(*args, **constants):
            self.triton_calls.append((grid, args, constants))
            return self.compiled
        return call


class FakeTuned(Autotuner):
    """Like a triton.autotune wrapper around FakeKernel, whose tuning picked GROUP = 4."""

    def __init__(self):      # noqa: the stand-in needs none of Autotuner's set-up
        self.fn = FakeKernel()
        self.best_config = type("Config", (), {"all_kwargs": lambda self: {"GROUP": 4, "num_warps": 8}})()

    def __getitem__(self, grid):
        return self.fn[grid]


class FakeDriver:
    class active:
        get_current_device = staticmethod(lambda: 0)
        get_current_stream = staticmethod(lambda device: 1234)


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(launch, "FAST_LAUNCH", True)
    monkeypatch.setattr(launch, "driver", FakeDriver)


def test_argument_key_separates_what_triton_specialises_on():
    x = torch.zeros(64, dtype=torch.bfloat16)
    assert launch.argument_key(x) == (torch.bfloat16, True)
    assert launch.argument_key(x[1:]) == (torch.bfloat16, False)     # 2 bytes off: not 16-byte aligned
    assert launch.argument_key(x.float()) == (torch.float32, True)
    assert launch.argument_key(4096) != launch.argument_key(4097)
    assert launch.argument_key(True) != launch.argument_key(1)      # equal in Python, not to Triton
    assert launch.argument_key(0.5) == launch.argument_key(2.0)     # passed as float32 whatever the value


def test_ordered_arguments_follow_the_signature():
    names = FakeKernel.arg_names
    values = launch.ordered_arguments(names, ("x", 10, 0.5), {"BLOCK": 64}, {"GROUP": 4, "num_warps": 8},
                                      {"FLAG": 7, "GROUP": 1})
    assert values == ["x", 10, 0.5, 64, 7, 4]          # the tuned GROUP wins over its default
    with pytest.raises(TypeError, match="BLOCK"):
        launch.ordered_arguments(names, ("x", 10, 0.5), {}, {}, {"FLAG": 7, "GROUP": 1})


def test_first_call_of_a_key_goes_through_triton_then_straight_to_the_compiled_kernel(fast):
    kernel = FakeKernel()
    launcher = launch.Launcher(kernel)
    x = torch.zeros(64)
    launcher((3,), x, 10, 0.5, BLOCK=64)
    assert len(kernel.triton_calls) == 1 and not kernel.compiled.launches
    launcher((5, 2), x, 10, 0.25, BLOCK=64)             # same key: another float, same ints and tensor
    assert len(kernel.triton_calls) == 1
    (launched,) = kernel.compiled.launches
    assert launched[:6] == (5, 2, 1, 1234, "function", "metadata")
    assert launched[9:] == (x, 10, 0.25, 64, 7, 1)      # every parameter, in signature order


def test_a_tma_descriptor_argument_is_keyed_by_its_kind_and_block_and_passed_as_each_call_gives_it(fast):
    """A host TMA descriptor (the chain pass's TMA snapshots) passed positionally: keyed like Triton keys it, not
    hashed, and each call launches with its own descriptor (a plan that kept the first call's would store into that
    call's memory)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    kernel = FakeKernel()
    launcher = launch.Launcher(kernel)
    first, second = torch.zeros(64, 32), torch.zeros(128, 32)
    described = [TensorDescriptor.from_tensor(x, [16, 32]) for x in (first, second)]
    launcher((3,), described[0], 10, 0.5, BLOCK=64)
    launcher((3,), described[1], 10, 0.5, BLOCK=64)     # same kind, dtype and block: the same key
    assert len(kernel.triton_calls) == 1
    (launched,) = kernel.compiled.launches
    assert launched[9] is described[1]
    launcher((3,), TensorDescriptor.from_tensor(second, [32, 32]), 10, 0.5, BLOCK=64)      # another block
    assert len(kernel.triton_calls) == 2


def test_a_new_key_asks_triton_again(fast):
    kernel = FakeKernel()
    launcher = launch.Launcher(kernel)
    x = torch.zeros(64)
    launcher((3,), x, 10, 0.5, BLOCK=64)
    launcher((3,), x[1:], 10, 0.5, BLOCK=64)            # misaligned address
    launcher((3,), x, 11, 0.5, BLOCK=64)                # another int
    launcher((3,), x, 10, 0.5, BLOCK=32)                # another constexpr
    launcher((3,), x.double(), 10, 0.5, BLOCK=64)       # another dtype
    assert len(kernel.triton_calls) == 5 and not kernel.compiled.launches


def test_autotuned_kernel_launches_with_its_tuned_config_and_grid(fast):
    tuned = FakeTuned()
    launcher = launch.Launcher(tuned)
    x = torch.zeros(64)
    grid = lambda meta: (100 // meta["GROUP"], meta["BLOCK"])      # noqa: E731
    launcher(grid, x, 10, 0.5, BLOCK=64)
    launcher(grid, x, 10, 0.5, BLOCK=64)
    (launched,) = tuned.fn.compiled.launches
    assert launched[:3] == (25, 64, 1)
    assert launched[9:] == (x, 10, 0.5, 64, 7, 4)       # GROUP from the tuned config; num_warps is an option


def test_launch_hooks_and_the_switch_send_every_call_through_triton(fast, monkeypatch):
    kernel = FakeKernel()
    launcher = launch.Launcher(kernel)
    x = torch.zeros(64)
    monkeypatch.setattr(launch.knobs.runtime, "launch_enter_hook", lambda metadata: None)
    for _ in range(2):
        launcher((3,), x, 10, 0.5, BLOCK=64)
    monkeypatch.setattr(launch.knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(launch, "FAST_LAUNCH", False)
    launcher((3,), x, 10, 0.5, BLOCK=64)
    assert len(kernel.triton_calls) == 3 and not kernel.compiled.launches


def test_positional_constexprs_and_keyword_constants_are_keyed_by_type_and_value(fast):
    kernel = FakeKernel()
    launcher = launch.Launcher(kernel)
    x = torch.zeros(64)
    launcher((3,), x, 10, 0.5, 64, 0.25)                 # BLOCK and FLAG given by position
    launcher((3,), x, 10, 0.5, 64, 0.75)                 # another float constexpr: another kernel
    launcher((3,), x, 10, 0.5, BLOCK=64, GROUP=True)
    launcher((3,), x, 10, 0.5, BLOCK=64, GROUP=1)        # True == 1 in Python, not to Triton
    assert len(kernel.triton_calls) == 4 and not kernel.compiled.launches


def test_the_grid_function_sees_the_constants_the_config_and_the_defaults(fast):
    """A fast launch hands the grid function the plan's meta (no dict of every argument built per launch): the
    keyword constants, the tuned config's values and the defaults of the parameters after the positional ones.
    A positional argument is not in it, so the grids in sparsegdn/triton read only those."""
    kernel = FakeKernel()
    launcher = launch.Launcher(kernel)
    x = torch.zeros(64)
    grid = lambda meta: (meta["BLOCK"] * 2, meta["GROUP"])      # noqa: E731 - a constant, a default
    launcher(grid, x, 10, 0.5, BLOCK=64)
    launcher(grid, x, 10, 0.5, BLOCK=64)
    (launched,) = kernel.compiled.launches
    assert launched[:3] == (128, 1, 1)
    with pytest.raises(KeyError):
        launcher(lambda meta: (meta["n"],), x, 10, 0.5, BLOCK=64)     # a positional, by name: not given


def test_a_plan_keeps_no_tensor_of_the_call_that_made_it(fast):
    """Plans live as long as the process: holding the first call's inputs would keep them in GPU memory."""
    import gc
    import weakref

    kernel = FakeKernel()
    launcher = launch.Launcher(kernel)
    x = torch.zeros(64)
    launcher(lambda meta: (meta["n"],), x, 10, 0.5, BLOCK=64)
    kernel.triton_calls.clear()                          # the stand-in's own record of the call
    alive = weakref.ref(x)
    del x
    gc.collect()
    assert alive() is None


def test_the_autotuners_tune_length_classes_apart():
    """A process that first runs 4K tokens must not keep 4K's tuned config for 32K or 128K (the kernel benchmark
    starts at 4K): the autotuned kernels key on chunk_loads.length_bucket, powers of 4 of the chunk count."""
    from sparsegdn.triton import chunk_loads, chunk_output, state_output, state_pass
    buckets = {tokens: chunk_loads.length_bucket(-(-tokens // 64)) for tokens in (4096, 8192, 16384, 32768, 65536,
                                                                                  131072)}
    assert buckets[4096] == buckets[8192] < buckets[16384] == buckets[32768] < buckets[65536] == buckets[131072]
    assert chunk_loads.length_bucket(1) == chunk_loads.length_bucket(0) == 4
    for kernel in (state_output.state_output_kernel, chunk_output.chunk_output_kernel, state_pass.state_pass_kernel):
        assert "LENGTH_BUCKET" in kernel.keys and "LENGTH_BUCKET" in kernel.fn.arg_names
