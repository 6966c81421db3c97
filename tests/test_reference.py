"""The PyTorch references, error reports, traffic counts, occupancy, recorded GPU data and
show_source: the pieces the lessons lean on besides the kernels."""

from __future__ import annotations

import inspect
import math
import os

import pytest
import torch

import helpers
import helpers.kernels as K
from helpers import DEVICE, TOLERANCES, gpu_data, traffic

INF, NAN = float("inf"), float("nan")
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
DTYPE_IDS = ["float32", "float16", "bfloat16", "float64"]


# ------------------------------------------------------------------------------------------
# naive vs stable
# ------------------------------------------------------------------------------------------


def test_naive_softmax_overflows_in_float32():
    x = torch.tensor([1000.0, 1001.0, 1002.0], device=DEVICE)
    out = helpers.naive_softmax(x)
    assert torch.isnan(out).all(), f"exp(1000) overflows to inf in float32 and inf/inf is NaN; got {out.tolist()}"
    # float32's exp overflows past 88.7, float64's past 709.8
    mid = torch.tensor([100.0, 101.0, 102.0], device=DEVICE)
    assert torch.isnan(helpers.naive_softmax(mid)).all()
    assert torch.isfinite(helpers.naive_softmax(mid.double())).all()
    assert torch.isnan(helpers.naive_softmax(x.double())).all()


def test_naive_softmax_is_right_for_small_inputs():
    x = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.0, 5.0]], device=DEVICE)
    torch.testing.assert_close(
        helpers.naive_softmax(x).cpu().double(), torch.softmax(x.cpu().double(), -1), **TOLERANCES[torch.float32]
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_stable_softmax_does_not_overflow_and_keeps_dtype(dtype):
    x = torch.tensor([1000.0, 1001.0, 1002.0], device=DEVICE).to(dtype)
    out = helpers.stable_softmax(x)
    assert out.dtype == dtype and out.shape == x.shape and out.device == x.device
    assert torch.isfinite(out).all()
    ref = torch.softmax(x.cpu().double(), -1)  # the same (cast) numbers, in float64
    torch.testing.assert_close(out.cpu().double(), ref, **TOLERANCES[dtype])


def test_stable_softmax_special_values_match_torch():
    x = torch.tensor([[1.0, -INF, 2.0], [-INF, -INF, -INF], [1.0, INF, 2.0], [NAN, 1.0, 2.0]], device=DEVICE)
    torch.testing.assert_close(helpers.stable_softmax(x), torch.softmax(x, -1), equal_nan=True)


def test_naive_softmax_rowwise_matches_stable():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 9, generator=g).to(DEVICE) * 10
    torch.testing.assert_close(helpers.naive_softmax_rowwise(x), helpers.stable_softmax(x))


def test_reference_softmax_is_float64_on_cpu():
    x = torch.randn(3, 4, device=DEVICE, dtype=torch.float16)
    ref = helpers.reference_softmax(x)
    assert ref.dtype == torch.float64 and ref.device.type == "cpu" and ref.shape == x.shape
    torch.testing.assert_close(ref, torch.softmax(x.cpu().double(), -1), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_assert_matches_reference(dtype):
    x = torch.randn(4, 6, dtype=torch.float64).to(DEVICE, dtype)
    helpers.assert_matches_reference(torch.softmax(x.double(), -1).to(dtype), x)
    wrong = torch.softmax(x.double(), -1).to(dtype)
    wrong[0, 0] += 0.1
    with pytest.raises(AssertionError):
        helpers.assert_matches_reference(wrong, x)


def test_assert_matches_reference_nan_placement():
    x = torch.tensor([[1.0, 2.0], [-INF, -INF]], device=DEVICE)
    helpers.assert_matches_reference(torch.softmax(x, -1), x)  # NaN row where torch has one
    with pytest.raises(AssertionError):
        helpers.assert_matches_reference(torch.zeros_like(x), x)


def test_tolerances_cover_every_dtype_and_grow_with_precision_loss():
    assert set(TOLERANCES) == {torch.float64, torch.float32, torch.float16, torch.bfloat16}
    order = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
    for key in ("atol", "rtol"):
        vals = [TOLERANCES[d][key] for d in order]
        assert vals == sorted(vals), f"{key} should loosen from float64 to bfloat16: {vals}"
    # each is at least one rounding of its dtype at 1.0 (half an ulp = eps / 2)
    for d in order:
        assert TOLERANCES[d]["rtol"] >= torch.finfo(d).eps / 2


# ------------------------------------------------------------------------------------------
# error_report
# ------------------------------------------------------------------------------------------


def test_error_report_exact():
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    rep = helpers.error_report(torch.softmax(x, -1), x)
    assert (rep.max_abs, rep.max_rel, rep.nan_mismatch) == (0.0, 0.0, 0)
    assert rep.ok() and rep.ok(atol=0.0)
    assert rep.shape == (1, 3) and rep.dtype == "float64"
    assert str(rep) == "max abs err 0.0e+00, max rel err 0.0e+00"


def test_error_report_numbers():
    x = torch.tensor([[0.0, math.log(3.0)]], dtype=torch.float64)  # softmax = [0.25, 0.75]
    out = torch.tensor([[0.25 + 1e-3, 0.75 - 3e-3]], dtype=torch.float32)
    rep = helpers.error_report(out, x)
    assert rep.max_abs == pytest.approx(3e-3, rel=1e-4)
    assert rep.max_rel == pytest.approx(4e-3, rel=1e-4)  # 1e-3 / 0.25 and 3e-3 / 0.75
    assert rep.nan_mismatch == 0
    assert rep.dtype == "float32" and rep.shape == (1, 2)
    assert not rep.ok(atol=1e-3) and rep.ok(atol=3.1e-3)
    assert str(rep) == "max abs err 3.0e-03, max rel err 4.0e-03"


def test_error_report_counts_nan_mismatches_both_ways():
    x = torch.tensor([[1.0, 2.0, 3.0], [-INF, -INF, -INF]])  # the reference's second row is NaN
    ref = torch.softmax(x.double(), -1)
    out = ref.clone().float()
    out[0, 1] = NAN  # NaN where the reference has a number
    out[1] = torch.tensor([0.1, NAN, 0.3])  # numbers where the reference has NaN (2 of 3)
    rep = helpers.error_report(out, x)
    assert rep.nan_mismatch == 3
    assert not rep.ok(atol=1.0)
    assert "3 NaN mismatches" in str(rep)
    # NaN in both places is agreement, and is left out of the numbers
    rep2 = helpers.error_report(ref.float(), x)
    assert rep2.nan_mismatch == 0 and rep2.ok()


def test_error_report_against_a_given_reference():
    ref = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    rep = helpers.error_report(torch.tensor([[0.5, 0.25]]), ref, is_reference=True)
    assert rep.max_abs == pytest.approx(0.25) and rep.max_rel == pytest.approx(0.5)


def test_error_report_inf_output_is_an_error():
    x = torch.tensor([[1.0, 2.0]])
    out = torch.tensor([[INF, 0.5]])
    rep = helpers.error_report(out, x)
    assert not rep.ok(atol=1e6)
    assert rep.max_abs > 1e300


def test_error_report_shape_mismatch():
    with pytest.raises(ValueError, match="shape"):
        helpers.error_report(torch.zeros(2, 3), torch.zeros(3, 2))


# ------------------------------------------------------------------------------------------
# Traffic counts (lesson 01) and occupancy (lesson 05)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("M, N", [(1, 1), (4, 7), (4096, 1024)])
def test_naive_traffic_counts(M, N):
    ops = traffic.naive_ops(M, N)
    assert [o.name for o in ops] == ["max", "subtract", "exp", "sum", "divide"]
    assert sum(o.reads for o in ops) == 5 * M * N + 2 * M
    assert sum(o.writes for o in ops) == 3 * M * N + 2 * M
    assert traffic.kernel_traffic("naive", M, N) == {"reads": 5 * M * N + 2 * M, "writes": 3 * M * N + 2 * M}


@pytest.mark.parametrize("kernel, reads", [("fused", 1), ("persistent", 1), ("online", 2), ("three_pass", 3)])
def test_kernel_traffic_counts(kernel, reads):
    M, N = 8, 300
    t = traffic.kernel_traffic(kernel, M, N)
    assert t == {"reads": reads * M * N, "writes": M * N}


def test_fused_traffic_is_the_minimum():
    M, N = 64, 512
    t = traffic.kernel_traffic("fused", M, N)
    assert t["reads"] + t["writes"] == 2 * M * N == traffic.min_bytes(M, N, 1)
    assert traffic.min_bytes(M, N, 4) == 8 * M * N


def test_naive_ops_code_is_the_code_of_naive_softmax_rowwise():
    """The table of operations quotes helpers.naive_softmax_rowwise line by line."""
    src = inspect.getsource(helpers.naive_softmax_rowwise)
    for op in traffic.naive_ops(2, 3):
        rhs = op.code.split("=", 1)[1].strip()
        assert rhs in src, f"{op.code!r} is not in naive_softmax_rowwise"


H100_LIKE = {
    "regs_per_sm": 65536,
    "shared_per_sm": 233472,
    "max_threads_per_sm": 2048,
    "max_blocks_per_sm": 32,
    "warp_size": 32,
}


def test_occupancy_registers_bind():
    occ = helpers.occupancy(n_regs=128, shared_bytes=0, num_warps=4, props=H100_LIKE)
    # 128 regs x 32 threads = 4096 per warp; 4 warps = 16384 per program -> 4 per SM
    assert occ["limits"]["registers"] == 4
    assert occ["programs_per_sm"] == 4 and occ["limited_by"] == "registers"


def test_occupancy_register_allocation_granularity():
    # 33 regs x 32 = 1056 -> rounded up to 1280 per warp; 8 warps = 10240 -> 6 per SM
    occ = helpers.occupancy(n_regs=33, shared_bytes=0, num_warps=8, props=H100_LIKE)
    assert occ["limits"]["registers"] == 65536 // (1280 * 8)


def test_occupancy_shared_memory_and_threads_bind():
    occ = helpers.occupancy(n_regs=16, shared_bytes=100_000, num_warps=1, props=H100_LIKE)
    assert occ["limits"]["shared memory"] == 2 and occ["limited_by"] == "shared memory"
    occ = helpers.occupancy(n_regs=16, shared_bytes=0, num_warps=32, props=H100_LIKE)
    assert occ["limits"]["threads"] == 2 and occ["programs_per_sm"] == 2
    occ = helpers.occupancy(n_regs=8, shared_bytes=1024, num_warps=1, props=H100_LIKE)
    assert occ["programs_per_sm"] == 32 and occ["limited_by"] == "blocks"


def test_occupancy_without_shared_memory_is_not_limited_by_it():
    """A kernel that uses no shared memory cannot be limited by it: when the block limit binds,
    say so (lesson 05 prints ``limited_by``)."""
    occ = helpers.occupancy(n_regs=8, shared_bytes=0, num_warps=1, props=H100_LIKE)
    assert occ["programs_per_sm"] == 32
    assert occ["limited_by"] == "blocks", f"limited_by={occ['limited_by']!r} for a kernel with no shared memory"


# ------------------------------------------------------------------------------------------
# Recorded GPU data
# ------------------------------------------------------------------------------------------


def test_gpu_data_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("SOFTMAX_COURSE_COMMIT", "abc1234")
    meta = gpu_data.provenance("python tools/bench.py --quick")
    assert tuple(meta) == gpu_data.PROVENANCE_KEYS
    assert meta["commit"] == "abc1234" and meta["command"] == "python tools/bench.py --quick"
    rows = [
        {"provider": "fused", "n_cols": 128, "gbps": 1234.5, "note": ""},
        {"provider": "online", "n_cols": 65536, "gbps": 2.5e3, "note": "a, quoted; value"},
        {"provider": "torch_softmax", "n_cols": 7, "gbps": 0.125, "note": "x"},
    ]
    path = gpu_data.write_csv(tmp_path / "sub" / "bench_test.csv", rows, meta)
    assert path.exists()
    text = path.read_text()
    assert text.startswith("# gpu: ")
    back, meta_back = gpu_data.read_csv(path)
    assert back == rows
    assert isinstance(back[0]["n_cols"], int) and isinstance(back[0]["gbps"], float)
    assert meta_back == {k: str(v) for k, v in meta.items()}
    # a path without the .csv suffix finds the same file
    assert gpu_data.read_csv(tmp_path / "sub" / "bench_test") == (back, meta_back)


def test_a_recordings_header_is_read_once_for_both_readers(tmp_path):
    """gpu_data.read_csv (rows of dicts) and data.load (a DataFrame) read the header through one function: the same
    provenance, the same rows, and data.provenance's line names what a lesson prints."""
    from helpers import data

    meta = {
        "gpu": "NVIDIA H100 80GB HBM3",
        "driver": "550.54",
        "torch": "2.5.1",
        "triton": "3.1.0",
        "date": "2025-01-01 12:00 UTC",
        "commit": "abc1234",
        "command": "make bench",
    }
    path = gpu_data.write_csv(tmp_path / "rec.csv", [{"N": 256, "ms": 0.5}, {"N": 512, "ms": 1.25}], meta)
    rows, got = gpu_data.read_csv(path)
    df = data.load(str(path))
    assert got == meta == df.attrs["provenance"] and rows == df.to_dict("records")
    assert gpu_data.split_header("# a: 1\n# b: x: y\nN,ms\n1,2\n") == ({"a": "1", "b": "x: y"}, "N,ms\n1,2")
    line = data.provenance(df)
    for key in ("gpu", "driver", "torch", "triton", "date", "command"):
        assert meta[key] in line
    assert line.startswith("rec.csv: ") and line.endswith(".") and "\n" not in line


def test_gpu_data_errors(tmp_path):
    with pytest.raises(ValueError, match="no rows"):
        gpu_data.write_csv(tmp_path / "empty.csv", [], {})
    with pytest.raises(FileNotFoundError, match="figures/data"):
        gpu_data.read_csv(tmp_path / "does_not_exist.csv")
    with pytest.raises(FileNotFoundError, match="GPU run"):
        gpu_data.read_csv("no_such_recording_anywhere")


def test_recorded_data_files_parse_and_name_their_gpu():
    """Every CSV under figures/data/ reads back with its provenance (the lessons print it)."""
    for path in sorted(gpu_data.DATA_DIR.glob("*.csv")):
        rows, meta = gpu_data.read_csv(path)
        assert rows, f"{path.name} has no rows"
        assert meta.get("gpu"), f"{path.name} has no '# gpu:' provenance line"
        for key in ("torch", "triton", "date", "commit"):
            assert key in meta, f"{path.name} lacks the provenance key {key!r}"


# ------------------------------------------------------------------------------------------
# show_source
# ------------------------------------------------------------------------------------------


def test_show_source_of_a_triton_kernel():
    shown = helpers.show_source(K.softmax_fused_kernel)
    text = repr(shown)
    assert "tl.load" in text and "tl.store" in text
    assert "def softmax_fused_kernel(" in text
    assert text == inspect.getsource(K.softmax_fused_kernel.fn)
    md = shown._repr_markdown_()
    assert md.startswith("**`helpers.kernels.fused.softmax_fused_kernel`**") and "```python\n" in md
    assert md.rstrip().endswith("```")


def test_show_source_of_a_python_function_and_title():
    shown = helpers.show_source(helpers.naive_softmax_rowwise, title="the naive version")
    assert repr(shown).startswith("def naive_softmax_rowwise(")
    assert shown._repr_markdown_().startswith("**`the naive version`**")


def test_show_source_rejects_objects_without_source():
    with pytest.raises(TypeError, match="show_source"):
        helpers.show_source(len)


# ------------------------------------------------------------------------------------------
# Mode
# ------------------------------------------------------------------------------------------


def test_mode_is_consistent():
    assert helpers.MODE in ("gpu", "interpreter")
    assert helpers.ON_GPU == (helpers.MODE == "gpu") and helpers.INTERPRETER == (not helpers.ON_GPU)
    assert helpers.DEVICE.type == ("cuda" if helpers.ON_GPU else "cpu")
    banner = helpers.banner()
    assert "\n" not in banner and "torch " in banner and "triton " in banner
    assert ("GPU (" in banner) == helpers.ON_GPU
    assert helpers.describe()


def test_importing_triton_before_helpers_without_a_gpu_gives_a_clear_error():
    import subprocess
    import sys

    import helpers

    if helpers.ON_GPU:
        pytest.skip("only the CPU interpreter path needs helpers imported first")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run(
        [sys.executable, "-c", "import triton; import helpers"], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode != 0
    assert "import helpers" in r.stderr and "before" in r.stderr
