"""The order of LaneATT's top-k anchors: PyTorch 1.6's CPU descending argsort, reproduced.

Official LaneATT checkpoints keep the `topk` most frequent anchors, taken with
`torch.argsort(freq, descending=True)[:topk]` under PyTorch 1.6 (CPU), and their
attention layer depends on that exact order. The frequency tensors hold many tied
counts, and that sort is not stable: in 1.6 it is TH's quicksort for descending
order (Sedgewick's 1978 non-recursive quicksort: median-of-three pivot, partitions
of at most 10 elements left for one final insertion-sort pass, strict comparisons).
`torch16_argsort_descending` follows the same steps on a copy of the values, so ties
come out where torch 1.6 put them; the tests compare it with orders recorded from the
real torch 1.6.0 wheel. NumPy only (no torch needed).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

ORDER_TORCH16 = "torch16"  # torch 1.6's CPU descending argsort (official checkpoints)
ORDER_STABLE = "stable"  # descending frequency, ties by anchor index
ORDERS = (ORDER_TORCH16, ORDER_STABLE)
DATASETS = ("culane", "tusimple", "llamas")
_SMALL = 10  # partitions of at most this many elements are left to the insertion pass
_DATA = Path(__file__).parent / "data"


def _greater(a: float, b: float) -> bool:
    """a > b, with NaN counted as the largest value (TH's GT_OR_NAN)."""
    return a > b or (math.isnan(a) and not math.isnan(b))


def torch16_argsort_descending(values: Any) -> np.ndarray:
    """Indices that sort `values` (1-D) in descending order exactly as torch 1.6's CPU argsort did."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {arr.shape}")
    val = arr.tolist()
    idx = list(range(len(val)))
    n = len(val)

    def swap(a: int, b: int) -> None:
        val[a], val[b] = val[b], val[a]
        idx[a], idx[b] = idx[b], idx[a]

    pending: list[tuple[int, int]] = []
    lo, hi = 0, n - 1
    finished = n - 1 <= _SMALL
    while not finished:
        # median of three: after these swaps val[lo + 1] >= val[lo] >= val[hi] (guards for the scans below)
        swap((lo + hi) >> 1, lo + 1)
        if _greater(val[hi], val[lo + 1]):
            swap(lo + 1, hi)
        if _greater(val[hi], val[lo]):
            swap(lo, hi)
        if _greater(val[lo], val[lo + 1]):
            swap(lo + 1, lo)
        pivot = val[lo]
        i, j = lo + 1, hi
        while True:
            i += 1
            while _greater(val[i], pivot):
                i += 1
            j -= 1
            while _greater(pivot, val[j]):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(lo, j)
        left, right = j - lo, hi - i + 1  # sizes of (lo, j-1) and (i, hi)
        if left <= _SMALL and right <= _SMALL:
            if pending:
                lo, hi = pending.pop()
            else:
                finished = True
        elif left <= _SMALL or right <= _SMALL:
            lo, hi = (lo, j - 1) if left > right else (i, hi)  # continue with the large one
        elif left > right:
            pending.append((lo, j - 1))
            lo = i
        else:
            pending.append((i, hi))
            hi = j - 1
    # one insertion pass over the whole array, right to left
    for i in range(n - 2, -1, -1):
        if _greater(val[i + 1], val[i]):
            held_val, held_idx = val[i], idx[i]
            j = i + 1
            while True:
                val[j - 1], idx[j - 1] = val[j], idx[j]
                j += 1
                if not (j < n and _greater(val[j], held_val)):
                    break
            val[j - 1], idx[j - 1] = held_val, held_idx
    return np.asarray(idx, dtype=np.int64)


def topk_anchor_indices(frequency: Any, k: int, order: str = ORDER_TORCH16) -> np.ndarray:
    """The k most frequent anchors, most frequent first, ties ordered by `order` (torch16 or stable)."""
    freq = np.asarray(frequency)
    if freq.ndim != 1:
        raise ValueError(f"anchor frequencies must be 1-D, got shape {freq.shape}")
    if not 1 <= k <= freq.shape[0]:
        raise ValueError(f"k must be in 1..{freq.shape[0]}, got {k}")
    if order == ORDER_TORCH16:
        ranked = torch16_argsort_descending(freq)
    elif order == ORDER_STABLE:
        ranked = np.argsort(-freq.astype(np.float64), kind="stable")
    else:
        raise ValueError(f"anchor order must be one of {', '.join(ORDERS)}, got {order!r}")
    return ranked[:k].astype(np.int64)


def dataset_frequency(name: str) -> np.ndarray:
    """The anchor-frequency table shipped for an official data set (culane, tusimple, llamas)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; use one of {', '.join(DATASETS)}")
    return np.load(_DATA / f"{name}_anchors_freq.npy")
