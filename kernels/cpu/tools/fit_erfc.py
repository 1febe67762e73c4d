#!/usr/bin/env python3
"""Fits the piecewise polynomial behind the CPU backend's vectorised GELU (kernels/cpu/simd.h).

GELU needs Φ(x) = erfc(−x/√2) / 2 with good relative accuracy for negative x, where the
textbook 1 + erf(x/√2) cancels. We write erfc(z) = exp(−z²) · R(z) with R(z) = erfc(z)·exp(z²),
a smooth, slowly varying function (1 at 0, about 1/(z√π) for large z), and approximate R on
[0, 8) by 8 polynomials of degree DEGREE, one per unit interval, in t = z − (i + 1/2).
Fit: least squares on Chebyshev nodes in double precision, weighted by 1/R (relative error).
Prints the C++ table (row k = coefficient of t^k for the 8 intervals) and the worst relative
error of erfc evaluated in float32 (with exp(−z²) assumed correctly rounded).
"""
import math
import sys

import numpy as np

DEGREE = int(sys.argv[1]) if len(sys.argv) > 1 else 8


def r_exact(z):
    return math.erfc(z) * math.exp(z * z)


coeffs = []  # coeffs[i][k], float32
for i in range(8):
    lo, hi, centre = float(i), float(i + 1), i + 0.5
    nodes = centre + 0.5 * np.cos(np.pi * (np.arange(4000) + 0.5) / 4000)
    basis = np.stack([(nodes - centre) ** k for k in range(DEGREE + 1)], axis=1)
    values = np.array([r_exact(z) for z in nodes])
    sol, *_ = np.linalg.lstsq(basis / values[:, None], np.ones_like(values), rcond=None)
    coeffs.append([np.float32(c) for c in sol])


def erfc_f32(z):
    z = np.float32(z)
    i = min(int(z), 7)
    t = np.float32(z - np.float32(i + 0.5))
    acc = coeffs[i][DEGREE]
    for k in range(DEGREE - 1, -1, -1):
        acc = np.float32(np.float32(acc * t) + coeffs[i][k])
    return float(np.float32(acc * np.float32(math.exp(-float(z) * float(z)))))


worst = 0.0
for z in np.linspace(0.0, 8.9, 100001):
    z = float(np.float32(z))
    worst = max(worst, abs(erfc_f32(z) - math.erfc(z)) / math.erfc(z))
print(f"// degree {DEGREE}: max relative error of erfc in float32 on [0, 8.9]: {worst:.3g}")
for k in range(DEGREE + 1):
    print("    {" + ", ".join(f"{coeffs[i][k].item():.9g}f" for i in range(8)) + "},")
