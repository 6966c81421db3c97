"""The child worker process of ``helpers.sandbox`` (``python -m helpers.sandbox_worker``), and the frames
both sides speak: it runs a learner's Triton kernel where nothing the kernel does (a segfault, a GPU fault
that poisons the CUDA context, an endless loop) can reach the notebook's process. Why, in docs/CONVENTIONS.md.

The worker puts each storage it receives between two slack regions of 0xFF bytes (NaN in every float type),
launches ``kernel[grid](*args, **kwargs)`` and sends the storages back. Frames on the pipes: an 8-byte
little-endian length, then a pickle. Only Triton's public API is used, but for one thing: under the
interpreter the worker counts the bytes the kernel reads and writes in each storage
(``helpers.traffic.counting``, which wraps the interpreter's memory methods), for the checkers' traffic line.
"""

from __future__ import annotations

import builtins
import hashlib
import math
import os
import pickle
import signal
import struct
import sys
import tempfile
import threading
import time

from .mode import INTERPRETER

#: Bytes of 0xFF slack before and after every storage in the worker.
SLACK = 1 << 20


# Frames


def send_frame(f, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)))
    f.write(data)
    f.flush()


def _read_exact(f, n: int) -> bytes:
    chunks, left = [], n
    while left:
        b = f.read(left)
        if not b:
            raise EOFError("the pipe closed")
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def recv_frame(f):
    (n,) = struct.unpack("<Q", _read_exact(f, 8))
    return pickle.loads(_read_exact(f, n))


# Worker


def _build(spec):
    """The kernel of ``spec``, in the worker."""
    import importlib

    import torch
    import triton
    import triton.language as tl

    if spec[0] == "import":
        return getattr(importlib.import_module(spec[1]), spec[2])
    _, name, src, env = spec
    ns = {"__name__": "__learner__", "__builtins__": builtins, "triton": triton, "tl": tl, "torch": torch, "math": math}
    for gname, gspec in env.items():
        try:
            if gspec[0] == "module":
                ns[gname] = importlib.import_module(gspec[1])
            elif gspec[0] == "kernel":
                ns[gname] = _build(gspec[1])
            else:
                ns[gname] = pickle.loads(gspec[1])
        except Exception:
            pass  # used by the kernel, it fails there with a NameError the learner can read
    import linecache

    digest = hashlib.sha1(src.encode()).hexdigest()[:12]
    filename = f"<learner kernel {name} {digest}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)
    return ns[name]


def _unpack(v, bufs):
    import torch

    if v[0] == "tensor":
        _, i, offset, shape, stride, dtype, _device = v
        base = bufs[i]
        size = torch.empty(0, dtype=dtype).element_size()
        t = torch.empty(0, dtype=dtype, device=base.device)
        return t.set_(base.untyped_storage(), SLACK // size + offset, shape, stride)
    if v[0] == "seq":
        items = [_unpack(u, bufs) for u in v[2]]
        return tuple(items) if v[1] else items
    return pickle.loads(v[1])


def _tensors(v):
    """The packed tensors (``("tensor", storage index, ..., device)``) in a packed argument."""
    if v[0] == "tensor":
        yield v
    elif v[0] == "seq":
        for u in v[2]:
            yield from _tensors(u)


def _chain(e) -> list:
    """``e`` and the exceptions it was raised from (8 at most)."""
    chain = []
    while e is not None and len(chain) < 8:
        chain.append(e)
        e = e.__cause__ or e.__context__
    return chain


def _cuda_failed(e) -> bool:
    return any(type(c).__name__ == "AcceleratorError" or "CUDA" in str(c) for c in _chain(e))


def _error(e) -> dict:
    try:
        pickled = pickle.dumps(e)
        pickle.loads(pickled)
    except Exception:
        pickled = None
    return {
        "type": type(e).__name__,
        "module": type(e).__module__,
        "message": str(e),
        "pickled": pickled,
        "not_implemented": any(isinstance(c, NotImplementedError) for c in _chain(e))
        or "NotImplementedError" in str(e),
    }


_KERNELS: dict = {}
_FF = b"\xff" * SLACK


def _handle(msg):
    import torch

    _, spec, grid, args, kwargs, storages = msg
    dev_of = {}  # every storage, on the device of its first tensor
    for v in list(args) + list(kwargs.values()):
        for t in _tensors(v):
            dev_of.setdefault(t[1], t[6])
    cuda = sorted(d for d in dev_of.values() if d.startswith("cuda"))
    on_cuda = bool(cuda)
    if on_cuda:  # Triton launches on the current device: the tensors' own
        torch.cuda.set_device(torch.device(cuda[0]))
    bufs = []
    for i, data in enumerate(storages):
        raw = bytearray(_FF) + bytearray(data) + bytearray(_FF)
        bufs.append(torch.frombuffer(raw, dtype=torch.uint8).to(dev_of.get(i, "cpu")))
    captured = tempfile.TemporaryFile()
    saved = os.dup(1)
    sys.stdout.flush()
    os.dup2(captured.fileno(), 1)
    kind, err, counted = "ok", None, None
    try:
        a = [_unpack(v, bufs) for v in args]
        kw = {k: _unpack(v, bufs) for k, v in kwargs.items()}
        key = hashlib.sha1(pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)).hexdigest()
        kernel = _KERNELS.get(key)
        if kernel is None:  # built once per distinct kernel (on a GPU, compiled once per signature)
            kernel = _KERNELS[key] = _build(spec)
        if INTERPRETER:  # count what each storage gives and takes (the traffic line of the checkers)
            from .traffic import counting

            with counting(**{f"s{i}": b for i, b in enumerate(bufs)}) as counted:
                kernel[grid](*a, **kw)
        else:
            kernel[grid](*a, **kw)
        if on_cuda:
            torch.cuda.synchronize()
    except BaseException as e:  # noqa: BLE001  (everything the learner's code can raise goes back)
        kind, err = "error", _error(e)
        if on_cuda:
            try:
                torch.cuda.synchronize()
                dead = _cuda_failed(e)
            except BaseException:  # noqa: BLE001
                dead = True
            if dead:
                kind = "cuda-error"
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    captured.seek(0)
    out = captured.read(20000).decode(errors="replace")
    captured.close()
    traffic = None if counted is None else [(counted.read[f"s{i}"], counted.written[f"s{i}"]) for i in range(len(bufs))]
    if kind == "cuda-error":
        return ("cuda-error", None, out, err, None)
    back, outside = [], []
    for i, b in enumerate(bufs):
        h = b.cpu().numpy()
        n = len(storages[i])
        if h[:SLACK].tobytes() != _FF or h[SLACK + n :].tobytes() != _FF:
            outside.append(i)
        back.append(h[SLACK : SLACK + n].tobytes())
    if kind == "ok" and outside:
        return ("wrote-outside", back, out, "your kernel wrote outside the memory of the tensors it was given", None)
    return (kind, back, out, err, traffic)


def _exit_with_parent(parent: int) -> None:
    """End the worker when the notebook's process is gone (even while a kernel of the learner hangs)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(1)


def main() -> None:
    # The parent decides when the worker stops (it kills it on a time-out or an interrupt); Jupyter's
    # interrupt button signals the whole process group, which must not end an idle worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # whatever the kernel prints cannot reach the protocol
    import helpers  # noqa: F401  (first: it decides interpreter or GPU before Triton loads)
    from helpers import mode

    if mode.INTERPRETER:
        import torch

        torch.set_num_threads(1)  # the interpreter's small tensors gain nothing from a thread pool
    import triton

    send_frame(proto_out, {"pid": os.getpid(), "mode": mode.MODE, "triton": triton.__version__})
    while True:
        try:
            msg = recv_frame(proto_in)
        except EOFError:
            return
        send_frame(proto_out, _handle(msg))


if __name__ == "__main__":
    main()
