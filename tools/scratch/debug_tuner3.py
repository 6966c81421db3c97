import torch, helpers
from helpers import tuning
from helpers.kernels.split import softmax_split_coop
tuning.autotune_tiled(32768, torch.float32)
x = torch.randn(64, 262144, device="cuda")
ref = torch.softmax(x.double(), -1)
print("ref sums", float((ref.sum(-1) - 1).abs().max()), "nan", bool(ref.isnan().any()))
out = softmax_split_coop(x, 4096, 4)
print("coop vs ref", float((out.double() - ref).abs().max()), "coop row sums", float((out.double().sum(-1) - 1).abs().max()))
print("coop vs torch fp32", float((out - torch.softmax(x, -1)).abs().max()))
c, r = tuning.autotune_coop(64, 262144, torch.float32)
print("autotune coop with checked reference:", c, [q["status"][:30] for q in r])
