# fft_tiling_error.py: f32 error of FFT-tiled ConvTranspose3d (2-D FFT tiles in H, W; direct in D)
# against f64, to size a strict-fp32 FFT family (L1-68-like channels and kernel) before writing it.
import sys

import numpy as np
import scipy.fft as fft


def reference(x, w):
    """y[co, od, oh, ow] = sum x[ci, od-kd, oh-kh, ow-kw] w[ci, co, kd, kh, kw] in f64 (stride 1,
    padding 0 transposed convolution = full convolution)."""
    ci, d, h, wd = x.shape
    _, co, kd, kh, kw = w.shape
    od, oh, ow = d + kd - 1, h + kh - 1, wd + kw - 1
    shape = (od, oh, ow)
    X = fft.rfftn(x.astype(np.float64), s=shape, axes=(1, 2, 3))
    W = fft.rfftn(w.astype(np.float64), s=shape, axes=(2, 3, 4))
    Y = np.einsum("idhw,iodhw->odhw", X, W)
    return fft.irfftn(Y, s=shape, axes=(1, 2, 3))


def fft_tiled(x, w, f):
    """Overlap-save tiles of f x f in (H, W), rfft2 per input slice and channel in f32, weights
    transformed in f64 and rounded once, complex products summed over (channel, D tap) in f32."""
    ci, d, h, wd = x.shape
    _, co, kd, kh, kw = w.shape
    od, oh, ow = d + kd - 1, h + kh - 1, wd + kw - 1
    to_h, to_w = f - kh + 1, f - kw + 1
    y = np.zeros((co, od, oh, ow), np.float32)
    Wf = fft.rfft2(w.astype(np.float64), s=(f, f), axes=(3, 4)).astype(np.complex64)
    xp = np.zeros((ci, d, oh + f, ow + f), np.float32)
    xp[:, :, kh - 1 : kh - 1 + h, kw - 1 : kw - 1 + wd] = x  # patch row 0 = input row h0-(kh-1)
    for h0 in range(0, oh, to_h):
        for w0 in range(0, ow, to_w):
            patch = xp[:, :, h0 : h0 + f, w0 : w0 + f]
            X = fft.rfft2(patch, axes=(2, 3))  # complex64 for f32 input
            for o in range(od):
                acc = np.zeros((co, f, f // 2 + 1), np.complex64)
                for k in range(kd):
                    i = o - k
                    if 0 <= i < d:
                        # one complex multiply-add per (ci, point) in f32, channels in order
                        for c in range(ci):
                            acc += X[c, i][None] * Wf[c, :, k]
                t = fft.irfft2(acc, s=(f, f), axes=(1, 2)).astype(np.float32)
                nh, nw = min(to_h, oh - h0), min(to_w, ow - w0)
                y[:, o, h0 : h0 + nh, w0 : w0 + nw] = t[:, kh - 1 : kh - 1 + nh, kw - 1 : kw - 1 + nw]
    return y


def main():
    rng = np.random.default_rng(0)
    ci, co, d, hw = int(sys.argv[1]) if len(sys.argv) > 1 else 32, 4, 6, 28
    for kernel in [(3, 5, 5), (3, 5, 7)]:
        x = rng.uniform(-1, 1, (ci, d, hw, hw)).astype(np.float32)
        w = rng.uniform(-1, 1, (ci, co) + kernel).astype(np.float32)
        ref = reference(x, w)
        for f in (16, 32):
            y = fft_tiled(x, w, f)
            err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
            print(f"kernel {kernel} C_in {ci} tile {f}x{f}: rel L2 {err:.2e}, "
                  f"max abs {np.abs(y - ref).max():.2e} (max |ref| {np.abs(ref).max():.1f})")


if __name__ == "__main__":
    main()
