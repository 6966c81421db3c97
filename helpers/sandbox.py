"""Run a learner's Triton kernel in a child worker process, so that nothing it does (a segfault, a
GPU fault that poisons the CUDA context, an endless loop) can take the notebook down: why, in
docs/CONVENTIONS.md.

The parent (``run``, this module) sends the kernel as source (with the values its code names and the
``@triton.jit`` functions it calls) and the whole storage of every tensor argument; the worker
(``python -m helpers.sandbox_worker``: helpers/sandbox_worker.py, which also holds the frames both sides
speak) launches ``kernel[grid](*args, **kwargs)`` between slack regions of 0xFF bytes and sends the
storages back, and, under the interpreter, the bytes the kernel read and wrote in each of them.
"""

from __future__ import annotations

import ast
import atexit
import inspect
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types

from .mode import INTERPRETER
from .sandbox_worker import recv_frame, send_frame

#: Seconds a learner's kernel may run (compilation included) before it is stopped.
KERNEL_TIMEOUT = 60.0 if INTERPRETER else 30.0
#: Seconds the worker may take to start (it imports torch, Triton and helpers).
START_TIMEOUT = 180.0
#: Library packages whose kernels the worker imports by name instead of receiving their source.
_IMPORTABLE = ("helpers", "triton")


class SandboxError(Exception):
    """The worker could not run the kernel (not the learner's fault: e.g. it failed to start)."""


class KernelCrashed(Exception):
    """The worker process died while running the kernel (``signal_name``: e.g. SIGSEGV)."""

    def __init__(self, returncode):
        self.returncode, self.signal_name = returncode, None
        try:
            self.signal_name = signal.Signals(-returncode).name if returncode and returncode < 0 else None
        except ValueError:
            pass
        super().__init__(f"the worker died ({self.signal_name or f'exit status {returncode}'})")


class KernelTimeout(Exception):
    """The kernel did not finish within ``limit`` seconds; the worker was killed."""

    def __init__(self, limit):
        self.limit = limit
        super().__init__(f"did not finish within {limit:g} s")


class KernelCudaError(Exception):
    """The kernel made the GPU fault (the worker's CUDA context is dead; the worker was restarted)."""


class KernelWroteOutside(Exception):
    """The kernel wrote into the slack around a tensor's storage (outside every tensor it was given)."""


class LearnerKernelError(Exception):
    """An exception of the learner's kernel that could not be sent back as itself (same type name)."""


# Parent: describe a kernel and its arguments


def _python_fn(k):
    fn, hops = k, 0
    while hasattr(fn, "fn") and not inspect.isfunction(fn) and hops < 4:
        fn, hops = fn.fn, hops + 1
    return fn


def is_jit_function(v) -> bool:
    """A ``@triton.jit`` object (compiled or interpreted), recognized without Triton's private types."""
    return (
        not isinstance(v, type)
        and type(v).__module__.split(".")[0] == "triton"
        and inspect.isfunction(_python_fn(v))
        and _python_fn(v) is not v
    )


def _names_in(src: str) -> list[str]:
    """The free names a function's source reads (decorators included): not its arguments, nor the
    names it assigns."""
    nodes = list(ast.walk(ast.parse(src)))
    local = {n.arg for n in nodes if isinstance(n, ast.arg)}
    local |= {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    loads = [n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return [name for name in dict.fromkeys(loads) if name not in local]


def _importable(k, fn) -> tuple[str, str] | None:
    mod = getattr(fn, "__module__", None) or ""
    if mod.split(".")[0] in _IMPORTABLE and getattr(sys.modules.get(mod), fn.__name__, None) is k:
        return mod, fn.__name__
    return None


def kernel_spec(k, _depth: int = 0):
    """What the worker needs to rebuild ``k``: ("import", module, name) for a library kernel, else
    ("source", name, source, {global name: spec}) for a kernel written in a notebook or a test."""
    fn = _python_fn(k)
    where = _importable(k, fn)
    if where:
        return ("import",) + where
    if _depth > 16:
        raise SandboxError("kernels call each other more than 16 levels deep")
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        top = ast.parse(src).body
    except (OSError, TypeError, SyntaxError) as e:
        raise SandboxError(
            f"cannot find the source of the kernel {fn.__name__!r} ({e}): define it in a "
            "notebook cell or a file (and run that again if its file changed)"
        ) from None
    if len(top) != 1 or not isinstance(top[0], ast.FunctionDef) or top[0].name != fn.__name__:
        raise SandboxError(
            f"the source of the kernel {fn.__name__!r} changed since it was defined: run the cell "
            "(or reload the module) that defines it again"
        )
    scope = dict(fn.__globals__)
    scope.update(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
    env = {}
    for name in _names_in(src):
        if name != fn.__name__ and name in scope:  # else a builtin
            spec = _value_spec(scope[name], _depth)
            if spec is not None:
                env[name] = spec
    return ("source", fn.__name__, src, env)


def _value_spec(value, depth):
    if isinstance(value, types.ModuleType):
        return ("module", value.__name__)
    if is_jit_function(value):
        return ("kernel", kernel_spec(value, depth + 1))
    if (inspect.isfunction(value) or inspect.isclass(value)) and (value.__module__ or "").startswith("__"):
        return None  # defined in the notebook: not importable in the worker
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None
    return ("value", data) if len(data) <= (1 << 20) else None


class _Packer:
    """Replaces every tensor in the arguments by a reference to a storage, sent once each."""

    def __init__(self):
        self.keys, self.u8, self.data = {}, [], []

    def pack(self, v):
        import torch

        if isinstance(v, torch.Tensor):
            st = v.untyped_storage()
            key = (str(v.device), st.data_ptr(), st.nbytes())
            if key not in self.keys:
                self.keys[key] = len(self.u8)
                u8 = torch.empty(0, dtype=torch.uint8, device=v.device).set_(st)
                self.u8.append(u8)
                self.data.append(u8.detach().cpu().numpy().tobytes())
            return (
                "tensor",
                self.keys[key],
                v.storage_offset(),
                tuple(v.shape),
                tuple(v.stride()),
                v.dtype,
                str(v.device),
            )
        if isinstance(v, (tuple, list)):
            return ("seq", type(v) is tuple, [self.pack(u) for u in v])
        try:
            return ("value", pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception as e:
            raise SandboxError(
                f"cannot send a kernel argument of type {type(v).__name__} to the worker ({e})"
            ) from None


def static_grid(kernel, grid, args, kwargs) -> tuple:
    """``grid`` as a tuple of ints (a callable grid gets a dict of the bound arguments, as Triton does)."""
    if callable(grid):
        names = getattr(kernel, "arg_names", None) or inspect.signature(_python_fn(kernel)).parameters
        meta = dict(zip(names, args))
        meta.update(kwargs)
        grid = grid(meta)
    if not isinstance(grid, (tuple, list)):
        grid = (grid,)
    return tuple(int(g) for g in grid)


# Parent: the worker


class _Worker:
    def __init__(self):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        if INTERPRETER:
            env["TRITON_INTERPRET"] = "1"
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "helpers.sandbox_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=root,
        )
        try:
            self.info = self._reply(START_TIMEOUT)
        except KernelTimeout:
            raise SandboxError(f"the kernel worker did not start within {START_TIMEOUT:g} s") from None
        except KernelCrashed as e:
            raise SandboxError(f"the kernel worker failed to start ({e}; its error is on stderr)") from None
        self.startup_s = time.perf_counter() - t0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        for step in (lambda: self.proc.wait(10), self.proc.stdin.close, self.proc.stdout.close):
            try:
                step()
            except Exception:
                pass

    def _reply(self, limit):
        box = {}

        def read():
            try:
                box["reply"] = recv_frame(self.proc.stdout)
            except BaseException as e:  # noqa: BLE001  (EOF: the worker died)
                box["error"] = e

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            reader.join(limit)
        except BaseException:  # an interrupt while waiting: the reply is lost, so is the worker
            self.kill()
            raise
        if reader.is_alive():
            self.kill()
            reader.join(10)
            raise KernelTimeout(limit)
        if "error" in box:  # the pipe closed: the worker died (its exit status says how)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
            self.kill()
            raise KernelCrashed(self.proc.returncode)
        return box["reply"]

    def request(self, msg, limit):
        try:
            send_frame(self.proc.stdin, msg)
        except (BrokenPipeError, OSError, ValueError):
            self.kill()
            raise KernelCrashed(self.proc.returncode) from None
        return self._reply(limit)


_lock = threading.Lock()
_worker: _Worker | None = None


def worker() -> _Worker:
    """The worker, started on first use (a few seconds: it imports torch and Triton)."""
    global _worker
    if _worker is None or not _worker.alive():
        restart()
        _worker = _Worker()
    return _worker


def restart() -> None:
    """Stop the worker; the next kernel starts a fresh one."""
    global _worker
    if _worker is not None:
        _worker.kill()
        _worker = None


atexit.register(restart)


#: What the last ``run`` moved, where the worker could count it (under the interpreter): per tensor argument,
#: ``(tensor, bytes read from its storage, bytes written to it)``; None where nothing was counted.
LAST_TRAFFIC: list | None = None


def run(kernel, grid, args, kwargs, timeout: float | None = None) -> float:
    """Launch ``kernel[grid](*args, **kwargs)`` in the worker and copy every tensor argument's storage
    back; the seconds it took. Raises ``KernelCrashed``, ``KernelTimeout``, ``KernelCudaError``,
    ``KernelWroteOutside`` or the learner's own exception (or a ``LearnerKernelError`` named as it).
    Under the interpreter, ``LAST_TRAFFIC`` says what the launch read and wrote, tensor by tensor."""
    global LAST_TRAFFIC
    LAST_TRAFFIC = None
    limit = KERNEL_TIMEOUT if timeout is None else float(timeout)
    spec = kernel_spec(kernel)
    grid = static_grid(kernel, grid, args, kwargs)
    packer = _Packer()
    packed_args = [packer.pack(a) for a in args]
    packed_kwargs = {k: packer.pack(v) for k, v in kwargs.items()}
    msg = ("run", spec, grid, packed_args, packed_kwargs, packer.data)
    with _lock:
        w = worker()
        t0 = time.perf_counter()
        reply = w.request(msg, limit)
        seconds = time.perf_counter() - t0
    kind, storages, out, err, traffic = reply
    if traffic is not None:
        tensors = [a for a in list(args) + list(kwargs.values()) if hasattr(a, "untyped_storage")]
        index = {key: i for key, i in packer.keys.items()}
        LAST_TRAFFIC = []
        for t in tensors:
            i = index[(str(t.device), t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())]
            LAST_TRAFFIC.append((t, *traffic[i]))
    if out:
        sys.stdout.write(out)
    if storages is not None:
        import torch

        for u8, data in zip(packer.u8, storages):
            if data:
                u8.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8).to(u8.device))
    if kind == "ok":
        return seconds
    if kind == "wrote-outside":
        restart()  # what else it overwrote in the worker is unknown
        raise KernelWroteOutside(err)
    if kind == "cuda-error":
        restart()  # its CUDA context is dead
        raise KernelCudaError(err["message"])
    # kind == "error": the learner's exception
    if err["not_implemented"]:
        raise NotImplementedError
    try:
        exc = pickle.loads(err["pickled"])
    except Exception:
        exc = None
    if not isinstance(exc, BaseException):
        key = (err["module"], err["type"])
        if key not in _ERROR_TYPES:
            _ERROR_TYPES[key] = type(err["type"], (LearnerKernelError,), {"__module__": err["module"]})
        exc = _ERROR_TYPES[key](err["message"])
    raise exc


_ERROR_TYPES: dict = {}
