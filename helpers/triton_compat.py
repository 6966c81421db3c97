"""What the course's direct launch needs from Triton and PyTorch internals, and how it differs by version.

Everything here reaches past a public API: a compiled kernel's own launcher, the current raw CUDA stream, the
launch hooks a profiler installs. ``helpers.launch`` is the only user; when an internal moves in a new release,
this module is the one to change (``tests/test_launch.py`` checks ``raw_launcher`` against the installed Triton).
"""

from __future__ import annotations

from collections.abc import Callable

import triton

from .mode import ON_GPU

raw_stream = None
_get_device = None
if ON_GPU:
    try:
        from torch._C import _cuda_getCurrentRawStream as raw_stream  # what Triton itself calls
        from torch._C import _cuda_getDevice as _get_device
    except ImportError:  # pragma: no cover - an older torch
        raw_stream = None


def current_device() -> int:
    """The index of the current CUDA device (-1 where there is none): a launcher made for a tensor
    on another device must run inside ``torch.cuda.device(its index)``."""
    return _get_device() if _get_device is not None else -1


def launch_hooks_installed() -> bool:
    """True when a profiler (Proton, a user) has installed a launch hook: the direct path would skip it.
    Triton 3.6 keeps the hooks in a HookChain that is never None: installed means it has calls."""
    try:
        knobs = triton.knobs.runtime
        hooks = (knobs.launch_enter_hook, knobs.launch_exit_hook)
    except AttributeError:  # pragma: no cover - a Triton without knobs
        return False
    return any(h is not None and (len(h.calls) > 0 if hasattr(h, "calls") else True) for h in hooks)


def raw_launcher(compiled) -> Callable:
    """``launch(gx, gy, gz, stream, *args)``: the compiled kernel's launcher called with raw pointers and
    the scalar and constexpr arguments in the kernel's order (no hooks, no scratch memory). Triton 3.6
    generates a launcher per kernel that takes the arguments one by one; from 3.7 one launcher serves
    every kernel and takes them as a tuple, with the kernel's signature. TypeError or AttributeError
    when the kernel needs scratch memory or this Triton's launcher differs (use ``kernel[grid](...)`` then)."""
    compiled._init_handles()  # load the kernel onto the GPU (Triton does it at the first launch)
    run = compiled.run
    if getattr(run, "global_scratch_size", 0) or getattr(run, "profile_scratch_size", 0):
        raise TypeError("kernel needs scratch memory")  # the plain launch path allocates it
    go, function, packed = run.launch, compiled.function, compiled.packed_metadata
    coop, pdl = run.launch_cooperative_grid, run.launch_pdl
    if hasattr(run, "kernel_signature"):  # Triton >= 3.7
        annotations, signature = run.arg_annotations, run.kernel_signature

        def launch(gx, gy, gz, stream, *args):
            go(
                gx,
                gy,
                gz,
                stream,
                function,
                coop,
                pdl,
                packed,
                None,
                None,
                None,
                None,
                None,
                annotations,
                signature,
                args,
            )
    else:  # Triton 3.6

        def launch(gx, gy, gz, stream, *args):
            go(gx, gy, gz, stream, function, coop, pdl, None, None, packed, None, None, None, *args)

    return launch
