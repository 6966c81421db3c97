"""Wrong input gets a clear error (type and key words pinned), and no helper modifies its input.

Conventions: public helpers validate tensors with helpers.checks.check_tensor: a non-tensor is a
TypeError, a non-floating dtype a TypeError naming the dtype, a 0-d tensor a ValueError, a tensor
on a device the kernels cannot serve a ValueError saying where to move it.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import helpers
import helpers.kernels as K
from helpers import DEVICE, MAX_FUSED_COLS, gpu_data, traffic

GOOD = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], device=DEVICE)
GOOD_OUT = torch.softmax(GOOD, -1)

#: The Triton kernels (they also check the device).
KERNELS = {
    "softmax_fused": helpers.softmax_fused,
    "softmax_three_pass": helpers.softmax_three_pass,
    "softmax_online": helpers.softmax_online,
    "softmax_persistent": helpers.softmax_persistent,
    "softmax": helpers.softmax,
}
for _extra in ("softmax_tiled", "softmax_split", "softmax_split_coop"):
    if hasattr(K, _extra):
        KERNELS[_extra] = getattr(K, _extra)

#: Every public helper that takes a tensor, with the name its errors give that tensor.
TENSOR_HELPERS = {
    **{name: (fn, "x") for name, fn in KERNELS.items()},
    "naive_softmax": (helpers.naive_softmax, "x"),
    "stable_softmax": (helpers.stable_softmax, "x"),
    "naive_softmax_rowwise": (helpers.naive_softmax_rowwise, "x"),
    "reference_softmax": (helpers.reference_softmax, "x"),
    "error_report(out=bad)": (lambda t: helpers.error_report(t, GOOD), "out"),
    "error_report(x=bad)": (lambda t: helpers.error_report(GOOD_OUT, t), "x"),
    "assert_matches_reference(x=bad)": (lambda t: helpers.assert_matches_reference(GOOD_OUT, t), "x"),
    "check_tensor": (helpers.check_tensor, "x"),
    "check_tensor(name='logits')": (lambda t: helpers.check_tensor(t, "logits"), "logits"),
}

NON_TENSORS = {
    "list": [[1.0, 2.0]],
    "float": 1.5,
    "None": None,
    "ndarray": np.ones((2, 3), dtype=np.float32),
    "str": "1 2 3",
}

BAD_DTYPES = [torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64]


@pytest.mark.parametrize("value", NON_TENSORS.values(), ids=NON_TENSORS.keys())
@pytest.mark.parametrize("helper", TENSOR_HELPERS)
def test_non_tensor_is_a_type_error(helper, value):
    fn, name = TENSOR_HELPERS[helper]
    with pytest.raises(TypeError) as info:
        fn(value)
    msg = str(info.value)
    assert f"{name} must be a torch.Tensor" in msg
    assert type(value).__name__ in msg
    assert "torch.tensor(" in msg  # says how to fix it


@pytest.mark.parametrize("dtype", BAD_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("helper", TENSOR_HELPERS)
def test_non_floating_dtype_is_a_type_error_naming_the_dtype(helper, dtype):
    fn, name = TENSOR_HELPERS[helper]
    x = torch.ones(2, 3, device=DEVICE).to(dtype)
    before = x.clone()
    with pytest.raises(TypeError) as info:
        fn(x)
    msg = str(info.value)
    assert str(dtype) in msg
    assert "floating" in msg and f"{name}.float()" in msg
    assert torch.equal(x, before)


@pytest.mark.parametrize("helper", TENSOR_HELPERS)
def test_zero_dim_tensor_is_a_value_error(helper):
    fn, name = TENSOR_HELPERS[helper]
    with pytest.raises(ValueError) as info:
        fn(torch.tensor(1.0, device=DEVICE))
    msg = str(info.value)
    assert "0-d" in msg and f"{name}.reshape(1)" in msg


@pytest.mark.parametrize("name", KERNELS)
def test_kernels_reject_a_tensor_on_the_wrong_device(name, wrong_device_tensor):
    with pytest.raises(ValueError) as info:
        KERNELS[name](wrong_device_tensor)
    msg = str(info.value)
    assert "device 'meta'" in msg
    assert f"'{DEVICE}'" in msg and "helpers.DEVICE" in msg


@pytest.mark.skipif(not helpers.ON_GPU, reason="on the CPU, CPU tensors are the right device")
@pytest.mark.parametrize("name", KERNELS)
def test_kernels_reject_a_cpu_tensor_on_a_gpu(name):
    with pytest.raises(ValueError, match=r"\.to\('cuda'\)"):
        KERNELS[name](torch.ones(2, 3))


def test_check_tensor_device_message_in_interpreter_mode(wrong_device_tensor):
    if helpers.ON_GPU:
        pytest.skip("the interpreter's message")
    with pytest.raises(ValueError) as info:
        helpers.check_tensor(wrong_device_tensor, kernel=True)
    msg = str(info.value)
    assert "no GPU" in msg and "x.cpu()" in msg
    helpers.check_tensor(wrong_device_tensor)  # without kernel=True the device is not checked


def test_check_tensor_accepts_good_tensors():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        assert helpers.check_tensor(torch.ones(3, device=DEVICE, dtype=dtype), kernel=True) is None
    assert helpers.check_tensor(torch.empty(0, 4, device=DEVICE), kernel=True) is None


@pytest.mark.parametrize("shape", [(6,), (2, 3, 4)], ids=["1d", "3d"])
def test_naive_softmax_rowwise_needs_2d(shape):
    with pytest.raises(ValueError, match=r"2-D.*" + str(shape).replace("(", r"\(").replace(")", r"\)")):
        helpers.naive_softmax_rowwise(torch.ones(shape, device=DEVICE))


def test_assert_matches_reference_validates_out():
    """``out`` gets the same checks as ``x`` (the conventions: public helpers validate with
    check_tensor), not an AttributeError/KeyError from deep inside."""
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        helpers.assert_matches_reference([[0.5, 0.5]], GOOD)
    with pytest.raises(TypeError, match="torch.int64"):
        helpers.assert_matches_reference(torch.ones(2, 3, dtype=torch.int64), GOOD)


# ------------------------------------------------------------------------------------------
# Kernel arguments
# ------------------------------------------------------------------------------------------

LOOPED = {"softmax_three_pass": helpers.softmax_three_pass, "softmax_online": helpers.softmax_online}


@pytest.mark.parametrize("block_size", [3, 6, 0, -4, 100], ids=lambda b: f"bs={b}")
@pytest.mark.parametrize("name", LOOPED)
def test_block_size_must_be_a_power_of_two(name, block_size):
    with pytest.raises(ValueError) as info:
        LOOPED[name](GOOD, block_size=block_size)
    msg = str(info.value)
    assert name in msg and "power of two" in msg and str(block_size) in msg


@pytest.mark.parametrize("block_size", [16.0, "16", True, np.float32(8)], ids=["float", "str", "bool", "np.float32"])
@pytest.mark.parametrize("name", LOOPED)
def test_block_size_must_be_an_int(name, block_size):
    with pytest.raises(TypeError) as info:
        LOOPED[name](GOOD, block_size=block_size)
    msg = str(info.value)
    assert name in msg and "block_size must be an int" in msg and repr(block_size) in msg


@pytest.mark.parametrize("name", LOOPED)
def test_block_size_above_the_on_chip_limit(name):
    big = 2 * MAX_FUSED_COLS  # a power of two, but no block that large fits on chip
    with pytest.raises(ValueError) as info:
        LOOPED[name](GOOD, block_size=big)
    assert str(big) in str(info.value) and str(MAX_FUSED_COLS) in str(info.value)


@pytest.mark.parametrize("name", LOOPED)
def test_block_size_suggests_a_fix(name):
    with pytest.raises(ValueError, match="try 8"):
        LOOPED[name](GOOD, block_size=5)


@pytest.mark.parametrize("arg", ["num_programs", "num_warps", "num_stages"])
@pytest.mark.parametrize("value", [0, -1, 2.0, True, "4"], ids=["0", "-1", "2.0", "True", "str"])
def test_persistent_launch_arguments(arg, value):
    with pytest.raises(ValueError) as info:
        helpers.softmax_persistent(GOOD, **{arg: value})
    msg = str(info.value)
    assert f"{arg} must be a positive int" in msg and repr(value) in msg


@pytest.mark.skipif(not hasattr(K, "softmax_tiled"), reason="no softmax_tiled yet")
@pytest.mark.parametrize("block_m", [3, 0, -2, 2.0], ids=["3", "0", "-2", "2.0"])
def test_tiled_block_m_is_checked(block_m):
    """block_m is a power of two (tl.arange), positive, an int: a clear error naming it, before
    launching (a non-positive block_m must not launch an empty grid and return torch.empty's
    uninitialized memory)."""
    with pytest.raises((ValueError, TypeError), match="block_m"):
        K.softmax_tiled(GOOD, block_m=block_m)


@pytest.mark.skipif(not hasattr(K, "softmax_split"), reason="no softmax_split yet")
@pytest.mark.parametrize(
    "kwargs",
    [dict(slices=0), dict(slices=2.0), dict(block_size=3), dict(block_size=0)],
    ids=["slices=0", "slices=2.0", "bs=3", "bs=0"],
)
def test_split_arguments_are_checked(kwargs):
    """As for the looped kernels: block_size=0 is an error, not the default."""
    ((arg, value),) = kwargs.items()
    with pytest.raises(ValueError, match=arg):
        K.softmax_split(GOOD, **kwargs)


@pytest.mark.parametrize("name", ["softmax_fused", "softmax_persistent"])
def test_long_rows_point_to_softmax_online(name):
    # (tests/test_kernels.py checks that this happens before any launch)
    with pytest.raises(ValueError, match=r"softmax_online"):
        KERNELS[name](torch.zeros(1, MAX_FUSED_COLS + 1, device=DEVICE))


# ------------------------------------------------------------------------------------------
# Nothing modifies its input
# ------------------------------------------------------------------------------------------


def _special_input():
    x = torch.tensor(
        [[1.0, float("-inf"), 2.0, 0.5], [float("nan"), 1.0, 2.0, 3.0], [float("-inf")] * 4], device=DEVICE
    )
    return x


CALLS = {
    **{name: fn for name, fn in KERNELS.items()},
    "naive_softmax": helpers.naive_softmax,
    "stable_softmax": helpers.stable_softmax,
    "naive_softmax_rowwise": helpers.naive_softmax_rowwise,
    "reference_softmax": helpers.reference_softmax,
    "error_report": lambda x: helpers.error_report(x, x),
    "error_report(is_reference)": lambda x: helpers.error_report(x, x, is_reference=True),
    "check_tensor": functools.partial(helpers.check_tensor, kernel=True),
}


@pytest.mark.parametrize("name", CALLS)
def test_no_helper_modifies_its_input(name):
    x = _special_input()
    before = x.clone()
    CALLS[name](x)
    torch.testing.assert_close(x, before, equal_nan=True, rtol=0, atol=0)


def test_assert_matches_reference_modifies_neither_argument():
    x = _special_input()
    out = torch.softmax(x, -1)
    x0, out0 = x.clone(), out.clone()
    helpers.assert_matches_reference(out, x)
    torch.testing.assert_close(x, x0, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(out, out0, equal_nan=True, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------
# Accounting helpers
# ------------------------------------------------------------------------------------------

PROPS = {
    "regs_per_sm": 65536,
    "shared_per_sm": 233472,
    "max_threads_per_sm": 2048,
    "max_blocks_per_sm": 32,
    "warp_size": 32,
}


@pytest.mark.parametrize("missing", list(PROPS))
def test_occupancy_names_a_missing_prop(missing):
    props = {k: v for k, v in PROPS.items() if k != missing}
    with pytest.raises(KeyError) as info:
        helpers.occupancy(32, 0, 4, props)
    assert missing in str(info.value) and "gpu_props" in str(info.value)


@pytest.mark.parametrize("n_regs, num_warps", [(0, 4), (-1, 4), (32, 0), (32, -2)])
def test_occupancy_needs_positive_registers_and_warps(n_regs, num_warps):
    with pytest.raises(ValueError, match="positive"):
        helpers.occupancy(n_regs, 0, num_warps, PROPS)


def test_occupancy_rejects_negative_shared_memory():
    """A negative byte count is a mistake, not 'no shared memory'."""
    with pytest.raises(ValueError, match="shared"):
        helpers.occupancy(32, -1024, 4, PROPS)


def test_occupancy_rejects_a_zero_warp_size():
    """A zero warp size is a bad props dict: a ValueError naming the key, not a ZeroDivisionError."""
    with pytest.raises(ValueError, match="warp_size"):
        helpers.occupancy(32, 0, 4, {**PROPS, "warp_size": 0})


def test_occupancy_does_not_modify_props():
    props = dict(PROPS)
    helpers.occupancy(32, 1024, 4, props)
    assert props == PROPS


def test_gpu_props_needs_a_gpu():
    if helpers.ON_GPU:
        assert helpers.gpu_props()["warp_size"] == 32
        return
    with pytest.raises(RuntimeError, match="needs a GPU") as info:
        helpers.gpu_props()
    # the message points somewhere real
    msg = str(info.value)
    if "gpu_data." in msg:
        fn = msg.split("gpu_data.")[1].split("(")[0]
        assert hasattr(gpu_data, fn), f"gpu_props()'s error points to helpers.gpu_data.{fn}(), which does not exist"


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3", None], ids=["0", "-1", "2.5", "True", "str", "None"])
@pytest.mark.parametrize("which", ["M", "N"])
def test_naive_ops_needs_positive_int_sizes(which, bad):
    args = {"M": 4, "N": 8, which: bad}
    with pytest.raises(ValueError) as info:
        traffic.naive_ops(**args)
    assert f"{which} must be a positive int" in str(info.value) and repr(bad) in str(info.value)


def test_kernel_traffic_unknown_kernel():
    with pytest.raises(ValueError) as info:
        traffic.kernel_traffic("fast", 4, 8)
    msg = str(info.value)
    assert "'fast'" in msg
    for known in ("naive", "fused", "online"):
        assert known in msg


@pytest.mark.parametrize("bad", [0, "3"], ids=["0", "str"])
def test_kernel_traffic_validates_sizes_for_every_kernel(bad):
    """kernel_traffic('naive', ...) rejects a bad M or N (through naive_ops); the other kernels
    must too, instead of returning negative counts, floats or repeated strings."""
    with pytest.raises(ValueError, match="positive int"):
        traffic.kernel_traffic("fused", bad, 8)
