# bw_probe.py: write-only (fill) and copy bandwidth of the device with PyTorch, CUDA events,
# median of 20, to tell how far a write-dominated kernel can go beyond the copy figure.
import torch

def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]

n = 64 * 8 * 64 ** 3  # WB-64's output elements
y = torch.empty(n, device="cuda")
x = torch.empty(n, device="cuda")
t = median_ms(lambda: y.fill_(1.0))
print(f"fill  {n*4/1e6:.0f} MB: {t:.4f} ms  {n*4/t/1e6:.0f} GB/s (write)")
t = median_ms(lambda: y.zero_())
print(f"zero  {n*4/1e6:.0f} MB: {t:.4f} ms  {n*4/t/1e6:.0f} GB/s (write)")
t = median_ms(lambda: y.copy_(x))
print(f"copy  {n*4/1e6:.0f} MB: {t:.4f} ms  {2*n*4/t/1e6:.0f} GB/s (read+write)")
m = n // 16
xs = torch.empty(m, device="cuda"); ys = torch.empty(n, device="cuda")
t = median_ms(lambda: ys.view(16, m).copy_(xs.expand(16, m)))
print(f"bcast {m*4/1e6:.0f} MB -> {n*4/1e6:.0f} MB: {t:.4f} ms  {(n+m)*4/t/1e6:.0f} GB/s (in+out bytes)")
