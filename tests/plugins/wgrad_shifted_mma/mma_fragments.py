"""mma.sync.m16n8k16 as the shifted-MMA kernels' simulations (test_shifted_mma_index_maps.py,
test_shifted_mma_sequence_maps.py) model it, from the PTX fragment layouts."""

import numpy as np

LANE = np.arange(32)
G, T = LANE >> 2, LANE & 3


def mma16816(a, b):
    """D = A @ B from the lanes' fragments: A (row) a0 (g, 2t..), a1 (g + 8, 2t..), a2 (g, 2t + 8..),
    a3 (g + 8, 2t + 8..); B (col) b0 (k 2t.., n g), b1 (k 2t + 8.., n g); each a pair of per-lane arrays.
    Returns the C fragments c[e][lane]: c0, c1 (g, 2t + e), c2, c3 (g + 8, 2t + e)."""
    A, B = np.full((16, 16), np.nan), np.full((16, 8), np.nan)
    for e in range(2):
        A[G, 2 * T + e], A[G + 8, 2 * T + e] = a[0][e], a[1][e]
        A[G, 2 * T + 8 + e], A[G + 8, 2 * T + 8 + e] = a[2][e], a[3][e]
        B[2 * T + e, G], B[2 * T + 8 + e, G] = b[0][e], b[1][e]
    assert not np.isnan(A).any() and not np.isnan(B).any(), "a fragment element no lane holds"
    D = A @ B
    return [D[G + 8 * (e >> 1), 2 * T + (e & 1)] for e in range(4)]
