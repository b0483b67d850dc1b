"""The top-k anchor order: torch 1.6's CPU descending argsort reproduced, checked against orders the real
torch 1.6.0 wheel recorded (tests/data/laneatt), and the shipped frequency tables."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from needs import torch_or_skip

torch = torch_or_skip()

from edge_deploy.lanedet.laneatt import anchor_order as AO


def _freq(laneatt_data: Path, dataset: str) -> np.ndarray:
    return torch.load(laneatt_data / f"{dataset}_anchors_freq.pt").numpy()


@pytest.mark.parametrize("dataset", ["culane", "tusimple", "llamas"])
def test_torch16_order_equals_the_recorded_torch16_order(laneatt_data: Path, dataset: str) -> None:
    recorded = np.load(laneatt_data / f"torch16_argsort_{dataset}.npy")
    order = AO.torch16_argsort_descending(_freq(laneatt_data, dataset))
    assert order.dtype == np.int64
    np.testing.assert_array_equal(order, recorded)  # all 2784 positions, ties included


@pytest.mark.parametrize("n", [1, 2, 3, 10, 11, 12, 37, 500, 2784])
def test_without_ties_it_is_a_plain_descending_argsort(n: int) -> None:
    values = np.random.default_rng(n).permutation(n * 3)[:n].astype(np.int32)
    np.testing.assert_array_equal(AO.torch16_argsort_descending(values), np.argsort(-values.astype(np.int64)))


def test_ties_are_not_in_index_order_and_the_culane_set_differs_from_a_stable_sort(laneatt_data: Path) -> None:
    freq = _freq(laneatt_data, "culane")
    torch16 = AO.topk_anchor_indices(freq, 1000)
    stable = AO.topk_anchor_indices(freq, 1000, AO.ORDER_STABLE)
    assert (np.diff(freq[torch16].astype(np.int64)) <= 0).all() and (np.diff(freq[stable].astype(np.int64)) <= 0).all()
    assert (torch16 != stable).sum() > 0
    assert set(torch16.tolist()) != set(stable.tolist())  # the tie at the cut (count 406) is split differently
    assert freq[torch16[-1]] == freq[stable[-1]]


def test_stable_order_keeps_index_order_for_ties() -> None:
    np.testing.assert_array_equal(AO.topk_anchor_indices(np.array([5, 9, 5, 9, 1, 5]), 4, "stable"), [1, 3, 0, 2])


def test_nan_sorts_first_as_in_torch() -> None:
    order = AO.torch16_argsort_descending(np.array([1.0, np.nan, 3.0, 2.0]))
    assert order.tolist() == [1, 2, 3, 0]


@pytest.mark.parametrize(("freq", "k", "order"), [
    (np.ones(10), 0, "torch16"), (np.ones(10), 11, "torch16"), (np.ones((2, 5)), 3, "torch16"), (np.ones(10), 3, "x"),
])
def test_bad_arguments_are_refused(freq: np.ndarray, k: int, order: str) -> None:
    with pytest.raises(ValueError):
        AO.topk_anchor_indices(freq, k, order)


@pytest.mark.parametrize("dataset", ["culane", "tusimple", "llamas"])
def test_shipped_tables_equal_the_official_files(laneatt_data: Path, dataset: str) -> None:
    shipped = AO.dataset_frequency(dataset)
    assert shipped.dtype == np.int32 and shipped.shape == (2784,)
    np.testing.assert_array_equal(shipped, _freq(laneatt_data, dataset))


def test_unknown_dataset_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="culane, tusimple, llamas"):
        AO.dataset_frequency("bdd")
