"""The lean launch path (helpers.launch): what is cached, what is not, and that the cached path is
as strict and as right as the first call. Runs on the CPU (interpreter) and on a GPU (where the
compiled kernel is launched directly)."""

import pytest
import torch

import helpers
from helpers import kernels as K
from helpers.launch import DIRECT
from helpers.mode import DEVICE
from helpers.rowwise import Rows, RowWise


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


def made_runs(monkeypatch) -> list:
    """The run functions launch.runner makes from now on (their names say which path: direct or JIT)."""
    from helpers import launch

    made, make = [], launch.runner
    monkeypatch.setattr(launch, "runner", lambda *a, **k: made.append(make(*a, **k)) or made[-1])
    return made


def path_of(run) -> str:
    return "jit" if run.__name__ == "jit_run" else "direct"


def test_direct_launch_on_a_gpu_jit_under_the_interpreter(monkeypatch):
    """On a GPU the cached entry launches the compiled kernel directly (not through the JIT); under
    the interpreter it goes through kernel[grid](...)."""
    from helpers.triton_compat import launch_hooks_installed

    made = made_runs(monkeypatch)
    x = randn(64, 301)
    helpers.softmax(x)
    assert [path_of(r) for r in made] == ["direct" if helpers.ON_GPU else "jit"]
    assert DIRECT[0] == helpers.ON_GPU
    assert not launch_hooks_installed()


@pytest.mark.parametrize("which", ["attention", "softmax_topk", "sample", "softmax_backward"])
def test_every_wrapper_takes_the_one_runtime(monkeypatch, which):
    """Attention, the sampling wrappers and the backward launch through launch.runner, as the softmax
    family does: on a GPU its direct path, under the interpreter the JIT (the same results)."""
    from helpers import launch

    made = made_runs(monkeypatch)
    q, k, v = (randn(1, 2, 41, 16, seed=s) for s in range(3))
    call = {
        "attention": lambda: helpers.attention(q, k, v),
        "softmax_topk": lambda: helpers.softmax_topk(q[0, 0, :3], 5),
        "sample": lambda: helpers.sample(q[0, 0, :3], top_k=4),
        "softmax_backward": lambda: helpers.softmax_backward(q[0, 0], k[0, 0]),
    }[which]
    call()
    assert made and {path_of(r) for r in made} == {"direct" if helpers.ON_GPU else "jit"}
    assert launch.direct_path(q) == helpers.ON_GPU and launch.direct_path(q.cpu()) is False
    n = len(made)
    call()  # the second call of the same kind finds its ready function
    assert len(made) == n
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert (helpers.attention(q, k, v).double() - ref).abs().max().item() < 1e-5


def test_a_workspace_is_cut_into_aligned_parts():
    """A plan's workspace is one allocation cut into named parts, each 16-byte aligned, in order."""
    from helpers.launch import _layout

    parts, words = _layout({"a": (3, torch.float32), "b": (5, torch.int64), "c": (1, torch.float16)})
    assert parts == {"a": (0, 3, torch.float32), "b": (4, 5, torch.int64), "c": (16, 1, torch.float16)}
    assert words == 17


_LAUNCHER_CALLS = r"""
import ast, json, os, sys, types
os.environ.pop("TRITON_INTERPRET", None)
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
if tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 7):
    print(json.dumps({"skip": f"Triton {triton.__version__} builds a launcher module per kernel: that needs a CUDA driver"}))
    sys.exit(0)
tree = ast.parse(open(sys.argv[1]).read())  # helpers/triton_compat.py: its raw_launcher alone (no GPU)
fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "raw_launcher")
ns = {"Callable": object}
exec(compile(ast.Module(body=[fn], type_ignores=[]), "triton_compat.py", "exec"), ns)
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
ns["raw_launcher"](types.SimpleNamespace(run=run, function=1234, packed_metadata=packed, _init_handles=lambda: None))(5, 1, 1, 777, 111, 222, 300, 64)
print(json.dumps({"calls": [repr(c) for c in calls]}))
"""


def test_the_raw_launcher_passes_what_tritons_own_launcher_passes(tmp_path):
    """helpers.triton_compat.raw_launcher calls a compiled kernel's launcher with raw pointers. Its arguments must
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
    launch_py = Path(helpers.__file__).resolve().parent / "triton_compat.py"
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

    w = RowWise(plan, "probe")
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
    with_fallback = RowWise(lambda rows: Plan([Launch(Refused(), (1,))], fallback=helpers.softmax_online), "f")
    assert_softmax(with_fallback(x), x)
    assert_softmax(with_fallback(x), x)  # the cached entry is the fallback
    without = RowWise(lambda rows: Plan([Launch(Refused(), (1,))]), "g")
    with pytest.raises(RuntimeError, match="cooperative"):
        without(x)


def test_the_keys_written_out_in_line_are_tensor_keys():
    """RowWise, RowWisePair and attention write launch.tensor_key out in line (for host time): the entries they
    keep are keyed by exactly tensor_key of their inputs and their options."""
    import sys

    from helpers.kernels import backward
    from helpers.launch import tensor_key

    A = sys.modules["helpers.kernels.attention"]
    x, y = randn(6, 40, seed=5), randn(6, 40, seed=6)[:, ::2]
    for w, inputs in ((wrapper("fused"), (x,)), (backward._backward_looped, (x[:, :20], y))):
        w.cache.clear()
        w(*inputs)
        assert list(w.cache) == [(*tensor_key(*inputs), ())]
    q, k, v = (randn(1, 2, 9, 16, seed=s) for s in range(3))
    A._ATTENTION.clear()
    helpers.attention(q, k, v, causal=True)
    assert list(A._ATTENTION) == [(*tensor_key(q, k, v), bool, True, type(None), None, bool, False)]
