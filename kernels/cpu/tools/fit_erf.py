#!/usr/bin/env python3
"""Fits the piecewise polynomials of the CPU backend's vectorised erf (kernels/cpu/simd.h).

erf(z) on [0, 4) is split into 8 intervals of width 1/2; interval i is approximated by a
polynomial in t = z - c_i (c_0 = 0, else the interval's midpoint) with the constant term of
interval 0 fixed at 0 so that erf stays accurate relative to z near 0. Fit: least squares on
Chebyshev nodes in double precision, weighted by 1/erf(z) (relative error). Prints the C++ table
and the worst errors of a float32 Horner evaluation.
"""
import math
import sys

import numpy as np

DEGREE = int(sys.argv[1]) if len(sys.argv) > 1 else 9
erf = np.vectorize(math.erf)

coeffs = []  # coeffs[i][k]
for i in range(8):
    lo, hi = 0.5 * i, 0.5 * i + 0.5
    c = 0.0 if i == 0 else lo + 0.25
    nodes = 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.cos(np.pi * (np.arange(4000) + 0.5) / 4000)
    t = nodes - c
    first = 1 if i == 0 else 0
    basis = np.stack([t**k for k in range(first, DEGREE + 1)], axis=1)
    w = 1.0 / erf(nodes)
    sol, *_ = np.linalg.lstsq(basis * w[:, None], erf(nodes) * w, rcond=None)
    coeffs.append(([0.0] if first else []) + list(sol))

def eval_f32(z):
    z = np.float32(z)
    i = min(int(z * 2), 7)
    c = np.float32(0.0 if i == 0 else 0.5 * i + 0.25)
    t = np.float32(z - c)
    acc = np.float32(coeffs[i][DEGREE])
    for k in range(DEGREE - 1, -1, -1):
        acc = np.float32(np.float32(acc * t) + np.float32(coeffs[i][k]))
    return min(acc, np.float32(1.0))

zs = np.linspace(1e-6, 3.999, 200001)
rel = max(abs(float(eval_f32(z)) - math.erf(z)) / math.erf(z) for z in zs)
print(f"// degree {DEGREE}: max relative error of erf in float32 on (0, 4): {rel:.3g}")
for k in range(DEGREE + 1):
    row = ", ".join(f"{np.float32(coeffs[i][k]).item():.9g}f" for i in range(8))
    print(f"    {{{row}}},")
