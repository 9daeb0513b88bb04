"""Kernel launches that skip Triton's per-call argument binding once a kernel is compiled for its inputs.

Triton's own launch path binds and specialises every argument, rebuilds the compile cache key and,
for an autotuned kernel, the tuning key, on every call. At 4K tokens that host work, six launches of
it, took longer than the kernels themselves (analysis/results/host_profile.txt). A `Launcher` sends
the first call of each *plan key* through Triton (compiling and autotuning as usual), keeps the
compiled kernel, the tuned config and the argument order it used, and launches the later calls of
that key straight through the compiled kernel's launcher.

The plan key holds what Triton specialises on, only finer: every int argument by value (Triton: ==1,
divisible by 16, fits in 32 bits), every tensor by dtype and 16-byte alignment of its address, every
constexpr and launch option by type and value, and the device. Ints by value mean a new length or event
count takes Triton's path once (and adds a small plan) before its calls go straight through. Equal keys therefore always select the kernel
Triton itself would run. Under the interpreter, with a launch hook set (profilers), or with
SPARSEGDN_FAST_LAUNCH=0, every call goes through Triton.
"""
from __future__ import annotations

import inspect
import os
import weakref

import torch
import triton
from triton import knobs
from triton.runtime.driver import driver

from . import call_record
from .chunk_loads import INTERPRET

FAST_LAUNCH = os.environ.get("SPARSEGDN_FAST_LAUNCH", "1") == "1" and not INTERPRET.value
# The register caps (the maxnreg launch option) a setting may name: 0 (none) or a multiple of 8 from 64 to 248
# (state_pass.CHAIN_MAXNREG, list_output.LIST_MAXNREG).
REGISTER_CAPS = (0, *range(64, 256, 8))


def argument_key(value):
    """What a runtime launch argument contributes to the plan key (see the module docstring)."""
    kind = type(value)
    if kind is int:
        return value               # the common case first: a launch has dozens of int arguments
    if kind is torch.Tensor or isinstance(value, torch.Tensor):
        return value.dtype, value.data_ptr() % 16 == 0
    if kind is float:
        return float               # a runtime float is passed as float32 whatever its value
    if is_descriptor(value):       # a TMA descriptor (Gluon's TensorDescriptor): as Triton keys it
        return kind, value.base.dtype, tuple(value.block_shape), repr(getattr(value, "layout", None)), value.padding
    return kind, value             # bools, None: by type and value (True == 1, but not for Triton)



def is_descriptor(x) -> bool:
    """A TMA descriptor argument (duck-typed as Triton's launcher reads it: base, shape, strides, block shape)."""
    return hasattr(x, "block_shape") and hasattr(x, "base") and hasattr(x, "strides")


def ordered_arguments(arg_names, args, constants, config_kwargs, defaults):
    """Every kernel parameter's value in signature order: `args` fill the first parameters, then
    each later one comes from `constants`, the tuned config or its default. Raises on a missing one."""
    values = list(args)
    for name in arg_names[len(args):]:
        if name in constants:
            values.append(constants[name])
        elif name in config_kwargs:
            values.append(config_kwargs[name])
        elif name in defaults:
            values.append(defaults[name])
        else:
            raise TypeError(f"kernel argument {name!r} not given")
    return values


def launch_hooks_set() -> bool:
    """A launch hook is installed (a profiler such as proton): Triton's own path feeds it its metadata.
    Triton 3.6 keeps the hooks in chain objects that are empty when none is installed."""
    return any(hook is not None and bool(getattr(hook, "calls", True))
               for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook))


def _grid_dims(grid):
    dims = tuple(grid) + (1, 1)
    return dims[0], dims[1], dims[2]


_LAUNCHERS: weakref.WeakSet = weakref.WeakSet()


def launchers() -> list:
    """Every Launcher of the modules imported so far (tools stub their kernels: benchmarks/host_path.py, the
    plans' CPU tests), by kernel name."""
    return sorted(_LAUNCHERS, key=lambda launcher: getattr(launcher.jit, "__name__", ""))


class Launcher:
    """`Launcher(kernel)(grid, *args, **constants)` launches `kernel` (a triton.jit function, or one
    wrapped by triton.autotune) like `kernel[grid](*args, **constants)`. `grid` is a tuple, or a
    function of the launch's meta-parameters: the constants, the tuned config's values and the parameters
    after the positional ones (Triton's first call also hands it the positional ones by name; a grid here
    must not read them)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.autotuned = isinstance(kernel, triton.runtime.Autotuner)
        self.jit = kernel.fn if self.autotuned else kernel
        self.arg_names = list(self.jit.arg_names)
        self.defaults = {name: param.default for name, param in inspect.signature(self.jit.fn).parameters.items()
                         if param.default is not inspect.Parameter.empty}
        self.constexpr = tuple(sorted(getattr(self.jit, "constexprs", ())))   # positions of constexpr parameters
        self.plans = {}
        _LAUNCHERS.add(self)

    def __call__(self, grid, *args, **constants):
        if not FAST_LAUNCH or launch_hooks_set():
            call_record.note_untracked_launch()
            return self.kernel[grid](*args, **constants)
        device = driver.active.get_current_device()
        key = (device, tuple(map(argument_key, args)),
               tuple(args[i] for i in self.constexpr if i < len(args)),      # by value: a float constexpr too
               tuple((name, type(value), value) for name, value in constants.items()))
        plan = self.plans.get(key)
        if plan is None:
            self.plans[key] = self._plan(grid, args, constants)
            call_record.note_untracked_launch()
            return None
        compiled, meta, tail = plan
        if callable(grid):      # the constants and the tuned config's values (the grids here read nothing else)
            grid = grid(meta)
        dims = _grid_dims(grid)
        compiled.run(*dims, driver.active.get_current_stream(device), compiled.function, compiled.packed_metadata,
                     None, None, None, *args, *tail)
        call_record.note_launch(compiled, dims, (*args, *tail))
        return None

    def _plan(self, grid, args, constants):
        """The first call of a key, through Triton: (compiled kernel, the parameters after the positional ones
        and the config's options by name, their values in order). Nothing of the call's tensors is kept."""
        compiled = self.kernel[grid](*args, **constants)
        config_kwargs = self.kernel.best_config.all_kwargs() if self.autotuned else {}
        tail = ordered_arguments(self.arg_names, args, constants, config_kwargs, self.defaults)[len(args):]
        meta = {**constants, **config_kwargs, **dict(zip(self.arg_names[len(args):], tail))}
        return compiled, meta, tuple(tail)
