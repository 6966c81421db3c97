"""The lean launch path (helpers.launch): what is cached, what is not, and that the cached path is
as strict and as right as the first call. Runs on the CPU (interpreter) and on a GPU (where the
compiled kernel is launched directly)."""

import pytest
import torch

import helpers
from helpers import kernels as K
from helpers.launch import DIRECT, Rows, RowSoftmax
from helpers.mode import DEVICE


def wrapper(name):
    import helpers.kernels.dispatch as D
    import helpers.kernels.fused as F
    import helpers.kernels.online as O
    import helpers.kernels.persistent as P
    import helpers.kernels.split as S

    return {
        "softmax": D._softmax,
        "fused": F.softmax_fused,
        "online": O._online,
        "tiled": P._tiled,
        "persistent": P._persistent,
        "split": S._split,
    }[name]


def randn(*shape, dtype=torch.float32, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEVICE)


def assert_softmax(y, x):
    helpers.assert_matches_reference(y, x)
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device


@pytest.mark.parametrize("name", ["softmax", "fused", "online", "tiled", "split"])
def test_second_call_uses_the_cache_and_is_still_right(name):
    w = wrapper(name)
    w.cache.clear()
    x = randn(37, 50, seed=1)
    assert_softmax(w(x), x)
    assert len(w.cache) == 1
    x2 = randn(37, 50, seed=2)  # same kind of tensor, new values: the cached entry, fresh numbers
    assert_softmax(w(x2), x2)
    assert len(w.cache) == 1


@pytest.mark.parametrize("name", ["softmax", "fused", "tiled"])
def test_each_kind_of_tensor_gets_its_own_entry(name):
    """A different dtype, row length, stride pattern or alignment is a different key, with its own plan."""
    w = wrapper(name)
    w.cache.clear()
    base = randn(40, 96, seed=3)
    cases = [
        base,  # the first kind
        base.to(torch.float16),  # another dtype
        randn(40, 200, seed=4),  # another row length
        base.t(),  # another stride pattern (a transposed view)
        torch.cat([base.reshape(-1), base.reshape(-1)[:1]])[1:].view(40, 96),  # same shape, 4 bytes off alignment
    ]
    for i, x in enumerate(cases, 1):
        assert_softmax(w(x), x)
        assert len(w.cache) == i, f"case {i} did not get its own cache entry"
    assert cases[-1].data_ptr() % 16 != 0
    # and the same kinds again find their entries
    for x in cases:
        assert_softmax(w(x), x)
    assert len(w.cache) == len(cases)


def test_plans_differ_where_the_tensor_differs():
    short, long = Rows.of(randn(8, 100)), Rows.of(randn(8, 3000))
    p_short, p_long = K.tiled_plan(short), K.tiled_plan(long)
    assert p_short.launches[0].constexprs["BLOCK_N"] == 128 and p_long.launches[0].constexprs["BLOCK_N"] == 4096
    t = Rows.of(randn(30, 20).t())
    assert (t.in_row_stride, t.in_col_stride) == (1, 20)


@pytest.mark.parametrize("name", ["softmax", "fused", "online", "split"])
def test_a_warm_cache_still_rejects_bad_input_with_the_same_message(name):
    w = wrapper(name)
    w.cache.clear()
    bad_inputs = [torch.arange(12).reshape(3, 4).to(DEVICE), torch.tensor(1.0, device=DEVICE), [1.0, 2.0]]
    first = []
    for bad in bad_inputs:
        with pytest.raises((TypeError, ValueError)) as info:
            w(bad)
        first.append((type(info.value), str(info.value)))
    x = randn(3, 4)
    w(x)
    w(x)  # the cache is warm for (3, 4) float32
    for bad, (etype, msg) in zip(bad_inputs, first):
        with pytest.raises(etype) as info:
            w(bad)
        assert str(info.value) == msg
    assert len(w.cache) == 1


def test_a_cached_option_does_not_admit_a_wrong_typed_one():
    """16.0 == 16 and True == 1 as dict keys: a valid cached call must not let them through."""
    x = randn(4, 64)
    helpers.softmax_online(x, block_size=16)
    helpers.softmax_online(x, block_size=1)
    for bad in (16.0, True):
        with pytest.raises(TypeError, match="block_size must be an int"):
            helpers.softmax_online(x, block_size=bad)


def test_wrong_device_is_refused_from_a_warm_cache():
    x = randn(5, 7)
    helpers.softmax(x)
    other = "meta"
    with pytest.raises(ValueError, match="on device"):
        helpers.softmax(torch.empty(5, 7, device=other))


@pytest.mark.parametrize("shape", [(2, 3, 50), (4, 1, 9)])
def test_leading_dims_that_do_not_merge_are_copied_into_rows_every_call(shape):
    """A permuted 3-D tensor whose leading dims have no single stride: the plan says 'copy', and
    every call copies (the copy itself is never cached)."""
    base = randn(shape[1], shape[0], shape[2], seed=7)
    x = base.permute(1, 0, 2)
    assert Rows.of(x).copy == (shape[1] > 1 and shape[0] > 1)
    for seed in (8, 9):
        base.copy_(randn(shape[1], shape[0], shape[2], seed=seed))
        assert_softmax(helpers.softmax(x), x)


def test_the_input_is_never_modified_on_the_cached_path():
    x = randn(16, 33, seed=5)
    x0 = x.clone()
    for _ in range(3):
        helpers.softmax(x)
    assert torch.equal(x, x0)


def test_the_output_is_a_new_tensor_every_call():
    x = randn(6, 10)
    a, b = helpers.softmax(x), helpers.softmax(x)
    assert a.data_ptr() != b.data_ptr() and torch.equal(a, b)


def test_direct_launch_on_a_gpu_jit_under_the_interpreter():
    """On a GPU the cached entry launches the compiled kernel directly (not through the JIT); under
    the interpreter it goes through kernel[grid](...)."""
    import helpers.kernels.dispatch as D
    from helpers.launch import _launch_hooks_installed

    x = randn(64, 300)
    helpers.softmax(x)
    entry = next(v for k, v in D._softmax.cache.items() if k[1] == x.shape)
    where = "_direct_call" if helpers.ON_GPU else "_jit_call"
    assert entry.__qualname__.startswith(where), entry.__qualname__
    assert DIRECT[0] == helpers.ON_GPU
    assert not _launch_hooks_installed()


def test_the_public_direct_launch_serves_attention():
    """helpers.attention takes launch's public direct path: on a GPU its cached call launches the
    compiled kernel through launch.direct_launcher (the same result as the JIT path); under the
    interpreter direct_path is False and it goes through kernel[grid](...)."""
    import sys

    from helpers import launch

    A = sys.modules["helpers.kernels.attention"]  # (helpers.kernels.attention is also the function's name)
    q, k, v = (randn(1, 2, 40, 16) for _ in range(3))
    assert launch.direct_path(q) == helpers.ON_GPU
    assert launch.direct_path(q.cpu()) is False
    out = helpers.attention(q, k, v)
    call = next(c for key, c in A._LAUNCHERS.items() if key and key[1] == q.shape)
    assert call.__qualname__.startswith("_launcher.<locals>." + ("direct_call" if helpers.ON_GPU else "jit_call"))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert (out.double() - ref).abs().max().item() < 1e-5
    if helpers.ON_GPU:
        assert launch.current_device() == q.get_device()
    else:
        assert launch.current_device() == -1


_LAUNCHER_CALLS = r"""
import ast, json, os, sys, types
os.environ.pop("TRITON_INTERPRET", None)
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
if tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 7):
    print(json.dumps({"skip": f"Triton {triton.__version__} builds a launcher module per kernel: that needs a CUDA driver"}))
    sys.exit(0)
tree = ast.parse(open(sys.argv[1]).read())  # helpers/launch.py: its raw_launcher alone (no helpers import, no GPU)
fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "raw_launcher")
ns = {"Callable": object}
exec(compile(ast.Module(body=[fn], type_ignores=[]), "launch.py", "exec"), ns)
open(os.path.join(sys.argv[2], "kern.py"), "w").write(
    "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(out, x, n, B: tl.constexpr):\n"
    "    o = tl.arange(0, B)\n    tl.store(out + o, tl.load(x + o, mask=o < n), mask=o < n)\n")
sys.path.insert(0, sys.argv[2])
import kern
src = ASTSource(fn=kern.k, signature={"out": "*fp32", "x": "*fp32", "n": "i32", "B": "constexpr"}, constexprs={"B": 64})
ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
calls = []
record = lambda *a: calls.append(a)  # in place of the driver's launch: there is no GPU
utils = types.SimpleNamespace(launch=record, build_signature_metadata=lambda sig: ("signature", tuple(sig)))
triton.runtime.driver.set_active(types.SimpleNamespace(utils=utils))
import triton.backends.nvidia.driver as nvd
# The argument annotations are objects of the driver's C module, built with the CUDA driver: stand-ins here.
nvd.PyKernelArg = lambda nested_tuple, type: ("arg", type, nested_tuple)
nvd.ARG_KERNEL, nvd.ARG_CONSTEXPR, nvd.ARG_TUPLE = "kernel", "constexpr", "tuple"
run = nvd.CudaLauncher(src, ck.metadata)
run.launch = record
packed = ("packed metadata",)
run(5, 1, 1, 777, 1234, packed, None, None, None, 111, 222, 300, 64)  # as Triton's JIT calls it
ns["raw_launcher"](types.SimpleNamespace(run=run, function=1234, packed_metadata=packed))(5, 1, 1, 777, 111, 222, 300, 64)
print(json.dumps({"calls": [repr(c) for c in calls]}))
"""


def test_the_raw_launcher_passes_what_tritons_own_launcher_passes(tmp_path):
    """helpers.launch.raw_launcher calls a compiled kernel's launcher with raw pointers. Its arguments must
    reach the driver as those of Triton's own launch path (the JIT's, ``CompiledKernel.run``) do, or the
    direct path is refused and every wrapper falls back to the slower JIT. The launcher's arguments
    changed between Triton 3.6 and 3.7: checked here against the installed Triton, without a GPU."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    if helpers.ON_GPU:
        pytest.skip("checked without a GPU (on a GPU the direct-path tests launch it)")
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    launch_py = Path(helpers.__file__).resolve().parent / "launch.py"
    r = subprocess.run(
        [sys.executable, "-c", _LAUNCHER_CALLS, str(launch_py), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in got:
        pytest.skip("this Triton's launcher cannot be built without a GPU: " + got["skip"])
    jit, raw = got["calls"]
    assert raw == jit


def test_a_plan_function_sees_rows_and_options():
    seen = []

    def plan(rows, scale=None):
        seen.append((rows.n_rows, rows.n_cols, scale))
        return K.fused_plan(rows)

    w = RowSoftmax(plan, "probe")
    x = randn(3, 5)
    w(x, 2)
    w(x, 2)
    w(x, 3)
    assert seen == [(3, 5, 2), (3, 5, 3)]


def test_a_refused_launch_uses_the_plans_fallback():
    """The driver refuses a cooperative grid it cannot keep resident with a RuntimeError, before
    anything runs: a plan with a fallback computes the result with it instead (and a plan without
    one lets the error through)."""
    from helpers.launch import Launch, Plan

    class Refused:
        arg_names = ["out_ptr", "in_ptr"]

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise RuntimeError("Triton Error [CUDA]: too many blocks in cooperative launch")

            return launch

        def warmup(self, *args, **kwargs):
            raise TypeError("no compiled kernel: use the JIT path")  # the direct path steps aside

    x = randn(4, 9)
    with_fallback = RowSoftmax(lambda rows: Plan([Launch(Refused(), (1,))], fallback=helpers.softmax_online), "f")
    assert_softmax(with_fallback(x), x)
    assert_softmax(with_fallback(x), x)  # the cached entry is the fallback
    without = RowSoftmax(lambda rows: Plan([Launch(Refused(), (1,))]), "g")
    with pytest.raises(RuntimeError, match="cooperative"):
        without(x)
