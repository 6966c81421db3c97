"""The one launch runtime of the course: every wrapper (the softmax family, the backward, attention,
``softmax_topk``, ``sample``) takes the same route.

1. **Check** the inputs (a clear error, before anything is cached).
2. **Look up** a ready function in a :class:`Cache`, keyed by all that decides the compiled plan:
   the tensors' dtypes, shapes, strides, devices and 16-byte alignment, and the options. Triton
   specializes a compiled kernel on its constexprs, on integers equal to 1 or divisible by 16, on
   16-byte aligned pointers and on the device: all of that is in the key, or fixed by it (outputs and
   workspaces come fresh from PyTorch's allocator, 512-byte aligned).
3. On the first call of a kind, make its :class:`Plan`: the launches, each a kernel with its grid, named
   pointers, scalar arguments, constexprs and options, and the workspace by name.
4. **Launch** it with :func:`runner`: on a GPU the compiled kernels' own launchers, called with raw
   pointers (``helpers.triton_compat``); under the interpreter, with a launch hook installed (a
   profiler), or where this Triton's launcher differs, ``kernel[grid](...)``, the JIT.

Done at every call, steps 1 and 3 and Triton's JIT cost 20-50 µs of host time (PERFORMANCE.md): a kernel
of a few µs is then *launch-bound*. Here a later call of a known kind is a lookup, its outputs' allocation
and the launches. Never cached: outputs, workspaces, data pointers, the current CUDA stream (a graph
capture changes it), the floats a plan names (Triton does not specialize on floats: each call passes its own).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import triton_compat as compat
from .mode import ON_GPU

#: Entries kept per wrapper before its cache is cleared (a guard against a loop over many shapes).
MAX_ENTRIES = 512


#: The pointer names of the row-wise wrappers (helpers.rowwise), the default of Launch.ptrs.
OUT, IN = "out", "in"


@dataclass
class Launch:
    """One kernel launch: ``kernel[grid](*pointers, *args, **constexprs, num_warps=..., ...)``.
    ``ptrs`` names the tensors that are its leading pointer arguments, in the kernel's order. An entry of
    ``args`` may be a name (a str): a float given with each call (``run(..., scalars={name: value})``)."""

    kernel: Any
    grid: tuple
    args: tuple = ()
    constexprs: dict = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int | None = None
    ptrs: tuple = (OUT, IN)
    cooperative: bool = False  # all programs resident at once (the driver refuses a grid that cannot be)
    pdl: bool = False  # programmatic dependent launch: may start before the launch ahead of it ends (Hopper on)

    def options(self) -> dict:
        opts = {"num_warps": self.num_warps}
        if self.num_stages is not None:
            opts["num_stages"] = self.num_stages
        if self.cooperative:
            opts["launch_cooperative_grid"] = True
        if self.pdl:
            opts["launch_pdl"] = True
        return opts


@dataclass
class Plan:
    """How a wrapper handles one kind of call: its launches and the workspace they share (name ->
    (elements, dtype), parts of one allocation made fresh for each call, zero-filled when ``zeroed``);
    or another function to call instead (``delegate``). ``fallback`` computes the result where the driver
    refuses the first launch (a cooperative grid it cannot keep resident). ``info`` holds what a lesson or
    a wrapper wants to know about the choice."""

    launches: list = field(default_factory=list)
    workspace: dict = field(default_factory=dict)
    zeroed: bool = False
    delegate: Callable | None = None
    fallback: Callable | None = None
    info: dict = field(default_factory=dict)


#: False once the installed Triton has been found not to take the direct launch: everything then
#: goes through the JIT (slower on the host, identical on the GPU).
DIRECT = [ON_GPU and compat.raw_stream is not None]


def direct_path(x) -> bool:
    """True when kernels for tensors like ``x`` may be launched by calling the compiled kernel's
    launcher directly: ``x`` is on a GPU, this Triton's launcher takes our arguments, and no launch
    hook (a profiler) is installed. Otherwise launch through ``kernel[grid](...)``."""
    return DIRECT[0] and x.is_cuda and not compat.launch_hooks_installed()


def _layout(workspace: dict) -> tuple[dict, int]:
    """The workspace's parts in one int32 allocation: name -> (offset in 4-byte words, elements, dtype),
    each part 16-byte aligned; and the words in all."""
    parts, words = {}, 0
    for name, (n, dtype) in workspace.items():
        words = -(-words // 4) * 4
        parts[name] = (words, n, dtype)
        words += -(-n * dtype.itemsize // 4)
    return parts, words


def _bind(args: tuple, scalars) -> tuple:
    """``args`` with each named float taken from ``scalars``."""
    return tuple(float(scalars[a]) if isinstance(a, str) else a for a in args)


def _compile(L: Launch, tensors: list) -> tuple:
    """``L`` compiled for these pointer tensors: (its raw launcher, the 3-D grid, the arguments after the
    pointers: the scalars, then the constexprs, which the launcher takes by position)."""
    compiled = L.kernel.warmup(*tensors, *L.args, grid=L.grid, **L.constexprs, **L.options())
    names = list(L.kernel.arg_names)[len(L.ptrs) + len(L.args) :]
    if any(n not in L.constexprs for n in names):
        raise TypeError(f"{L.kernel.__name__}: parameters {names} after the scalar arguments must all be constexprs")
    grid = tuple(L.grid) + (1,) * (3 - len(L.grid))
    return compat.raw_launcher(compiled), grid, tuple(L.args) + tuple(L.constexprs[n] for n in names)


def runner(plan: Plan, names: tuple, examples: tuple, fixed: dict | None = None) -> Callable:
    """``run(*tensors, scalars=None)``: queue ``plan``'s launches on the current stream of the tensors'
    device, with the tensors named ``names`` (in that order) and a fresh workspace. ``examples`` are
    tensors like those a call passes: on a GPU the launches are compiled for them here, once, and launched
    on them once (a launcher that takes other arguments refuses there, and everything takes the JIT from
    then on: ``DIRECT[0] = False``). A named float in a launch's ``args`` comes from ``fixed``, once, or
    else from each call's ``scalars``. The workspace lives until every launch is queued: PyTorch's
    allocator keeps memory freed on a stream for the work already queued on it."""
    if fixed:
        args_of = lambda L: tuple(fixed.get(a, a) if isinstance(a, str) else a for a in L.args)  # noqa: E731
        launches = [dataclasses.replace(L, args=args_of(L)) for L in plan.launches]
    else:
        launches = list(plan.launches)
    parts, words = _layout(plan.workspace)
    slot = {name: i for i, name in enumerate((*names, *parts))}
    idx = [tuple(slot[p] for p in L.ptrs) for L in launches]
    named = any(isinstance(a, str) for L in launches for a in L.args)
    dev, index = examples[0].device, examples[0].get_device()
    alloc, cuts = (torch.zeros if plan.zeroed else torch.empty), list(parts.values())
    offsets = [4 * o for o, _, _ in cuts]

    def workspace() -> list:
        w = alloc(words, dtype=torch.int32, device=dev)
        return [w[o : o + -(-n * dt.itemsize // 4)].view(dt)[:n] for o, n, dt in cuts]

    def jit_run(*tensors, scalars=None):
        if index >= 0 and compat.current_device() != index:  # launch in the tensors' own device context
            with torch.cuda.device(index):
                return jit_run(*tensors, scalars=scalars)
        ts = (*tensors, *workspace()) if words else tensors
        for L, ix in zip(launches, idx):
            L.kernel[L.grid](*(ts[i] for i in ix), *_bind(L.args, scalars), **L.constexprs, **L.options())

    if not direct_path(examples[0]):
        return jit_run
    ones = collections.defaultdict(lambda: 1.0)  # a float's value changes nothing that is compiled
    with torch.cuda.device(index):
        ts = (*examples, *workspace()) if words else examples
        try:
            compiled = [
                _compile(dataclasses.replace(L, args=_bind(L.args, ones)), [ts[i] for i in ix])
                for L, ix in zip(launches, idx)
            ]
        except (TypeError, AttributeError):  # a kernel this launcher cannot take (scratch memory): the JIT
            return jit_run
        ptrs, stream = [t.data_ptr() for t in ts], compat.raw_stream(index)
        try:
            for (go, grid, rest), ix in zip(compiled, idx):
                go(*grid, stream, *[ptrs[i] for i in ix], *rest)
        except TypeError:  # this Triton's launcher refused the arguments before launching anything
            DIRECT[0] = False
            return jit_run
    raw_stream, device_now = compat.raw_stream, compat.current_device

    if len(launches) == 1 and not words and not named and idx[0] == tuple(range(len(names))):
        # The common case, kept to the fewest Python operations: one launch of the caller's tensors, in order.
        ((go, (gx, gy, gz), rest),) = compiled
        if len(names) == 2:  # out and x

            def direct_run2(a, b, scalars=None):
                if device_now() != index:
                    with torch.cuda.device(index):
                        return direct_run2(a, b)
                go(gx, gy, gz, raw_stream(index), a.data_ptr(), b.data_ptr(), *rest)

            return direct_run2

        def direct_run1(*tensors, scalars=None):
            if device_now() != index:
                with torch.cuda.device(index):
                    return direct_run1(*tensors)
            go(gx, gy, gz, raw_stream(index), *[t.data_ptr() for t in tensors], *rest)

        return direct_run1

    todo = [
        (go, *grid, ix, rest, rest[len(L.args) :], L.args if named else None)
        for (go, grid, rest), ix, L in zip(compiled, idx, launches)
    ]
    bound = [(None, [rest for *_, rest, _, _ in todo])]  # (the scalars last given, each launch's arguments)

    def direct_run(*tensors, scalars=None):
        if device_now() != index:
            with torch.cuda.device(index):
                return direct_run(*tensors, scalars=scalars)
        ptrs = [t.data_ptr() for t in tensors]
        if words:
            w = alloc(words, dtype=torch.int32, device=dev)  # held until every launch below is queued
            ptrs += [w.data_ptr() + o for o in offsets]
        b = bound[0]  # one read: another thread may replace it meanwhile, never change it
        if named and scalars != b[0]:  # new values: bind them (a loop that keeps its temperature binds once)
            b = bound[0] = (
                scalars,
                [rest if a is None else (*_bind(a, scalars), *consts) for *_, rest, consts, a in todo],
            )
        stream = raw_stream(index)
        for (go, gx, gy, gz, ix, *_), rest in zip(todo, b[1]):
            go(gx, gy, gz, stream, *[ptrs[i] for i in ix], *rest)

    return direct_run


def tensor_key(*tensors) -> tuple:
    """What of each tensor decides a compiled plan: dtype, shape, strides, device, 16-byte alignment. A wrapper
    called often writes these parts out in line (a function call costs host time); tests check they agree."""
    key = []
    for t in tensors:
        key += (t.dtype, t.shape, t.stride(), t.device, not t.data_ptr() & 15)
    return tuple(key)


class Cache(dict):
    """Ready functions, one per kind of call: ``cache[key](*args)``. ``first_call(key, build, *args)`` makes
    one with ``build()`` (which checks the inputs first, so a bad input raises there, gets its clear error
    and never an entry), calls it, and keeps it. A ready function that the driver refuses on its first call
    with a RuntimeError is replaced by its ``fallback`` attribute, if it has one. At most ``MAX_ENTRIES``
    (a guard against a loop over ever new shapes); a key that is None or unhashable is not kept."""

    def first_call(self, key, build: Callable, *args):
        entry = build()
        try:
            out = entry(*args)
        except RuntimeError:  # refused launches run nothing: the fallback computes the result instead
            fallback = getattr(entry, "fallback", None)
            if fallback is None:
                raise
            entry, out = fallback, fallback(*args)
        if key is not None:
            if len(self) >= MAX_ENTRIES:
                self.clear()
            try:
                self[key] = entry
            except TypeError:  # unhashable options the plan accepted: just do not cache
                pass
        return out

    def call(self, key, build: Callable, *args):  # self[key](*args), or the first call of this kind
        try:
            entry = self[key]
        except (KeyError, TypeError):
            return self.first_call(key, build, *args)
        return entry(*args)
