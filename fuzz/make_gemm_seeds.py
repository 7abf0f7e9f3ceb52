"""Writes the committed seeds of the `gemm` fuzz target, fuzz/corpus/seed/gemm/ (run from the repo
root: python3 fuzz/make_gemm_seeds.py). Per kernel (byte 0, `gemm_case.rs`), inputs whose shapes
sit on the kernels' edges (byte 2-4 index `M`, `K`, `N`) with each flag set and each value mix,
70 bytes each (the values then come from the generator seeded by bytes 6-69)."""
import os, random

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = os.path.join(ROOT, "fuzz", "corpus", "seed", "gemm")
os.makedirs(SEED, exist_ok=True)
r = random.Random(26)
# (m, k, n) indices into M, K, N: small, odd, at 16 / 32 / 64 / 72 / 96, the 256 / 512 chunks
SHAPES = [(0, 0, 0), (4, 11, 13), (6, 18, 15), (11, 22, 9), (23, 8, 21), (24, 19, 14),
          (20, 23, 12), (2, 30, 5), (13, 25, 17), (25, 14, 22)]
n = 0
for kernel in range(8):
    for s, (mi, ki, ni) in enumerate(SHAPES):
        flags = r.randrange(256)
        mix = [0, 1, 2 | (1 << 2), 2 | (3 << 2), 2 | (4 << 2), 0x80 | 1, 2 | (6 << 2), 3][s % 8]
        head = bytes([kernel, flags, mi, ki, ni, mix])
        body = bytes(r.randrange(256) for _ in range(64))
        with open(os.path.join(SEED, f"k{kernel}_{s}"), "wb") as f:
            f.write(head + body)
        n += 1
print(f"{n} seeds in {SEED}")
