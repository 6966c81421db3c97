import torch, triton, helpers, sys
from helpers import tuning, launch
from helpers.kernels.persistent import softmax_tiled, softmax_tiled_kernel, _tiled
from helpers.kernels.split import softmax_split_coop
def err(out, ref): return (out.double()-ref).abs().max().item()
x = torch.randn(4096, 32768, device="cuda")
ref = torch.softmax(x.double(), -1)
print("ref row sums", ref.sum(-1)[:3].tolist(), "ref max", ref.max().item())
print("torch fp32 vs ref", err(torch.softmax(x, -1), ref))
print("softmax_tiled (1,32,1,0)", err(softmax_tiled(x, 1, 32, 1, 0), ref))
e = next(iter(_tiled.cache.values()))
print("entry", e.__qualname__)
if e.__closure__:
    cells = dict(zip(e.__code__.co_freevars, (c.cell_contents for c in e.__closure__)))
    print("rest", cells.get("rest"), "grid", cells.get("gx"), cells.get("gy"), cells.get("gz"))
launch.DIRECT[0] = False
_tiled.cache.clear()
print("JIT path (1,32,1,0)", err(softmax_tiled(x, 1, 32, 1, 0), ref))
launch.DIRECT[0] = True
_tiled.cache.clear()
y = torch.empty_like(x)
triton.testing.do_bench_cudagraph(lambda: y.copy_(x), rep=20)
print("after a cudagraph bench: direct (1,32,1,0)", err(softmax_tiled(x, 1, 32, 1, 0), ref))
_tiled.cache.clear()
print("direct (1,16,1,0)", err(softmax_tiled(x, 1, 16, 1, 0), ref))
# small N and coop
for M, N in ((64, 262144), (8, 1048576)):
    x = torch.randn(M, N, device="cuda"); ref = torch.softmax(x.double(), -1)
    print(M, N, "ref nan?", ref.isnan().any().item(), "coop default", err(softmax_split_coop(x), ref), "coop 8192/8", err(softmax_split_coop(x, 8192, 8), ref))
    y = torch.empty_like(x)
    triton.testing.do_bench_cudagraph(lambda: y.copy_(x), rep=20)
    print("   after cudagraph bench: coop 8192/8", err(softmax_split_coop(x, 8192, 16), ref), "default", err(softmax_split_coop(x), ref))
# evict_first effect at fp32 1024 (GPU time): tiled vs fused
x = torch.randn(4096, 1024, device="cuda"); y = torch.empty_like(x)
g = lambda f: triton.testing.do_bench_cudagraph(f, rep=20, return_mode="median")
c = g(lambda: y.copy_(x))
for cfg in ((1,2,1,0),(1,4,1,0),(2,4,1,0)):
    print("fp32 1024 tiled", cfg, c / g(lambda: softmax_tiled(x, *cfg)))
print("fp32 1024 fused", c / g(lambda: helpers.softmax_fused(x)))
