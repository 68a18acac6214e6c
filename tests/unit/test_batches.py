"""Sample counting from batch structure."""

import numpy as np
import torch

from pipecheck.probes.batches import count_samples


def test_collated_tuple():
    assert count_samples((torch.zeros(32, 3, 8, 8), torch.zeros(32))) == 32


def test_plain_tensor_and_array():
    assert count_samples(torch.zeros(5, 2)) == 5
    assert count_samples(np.zeros((7, 3))) == 7


def test_dict_batch():
    assert count_samples({"x": torch.zeros(6, 2), "y": torch.zeros(6)}) == 6


def test_uncollated_sample_is_one():
    assert count_samples((torch.zeros(3, 224, 224), torch.tensor(4))) == 1
    assert count_samples({"image": torch.zeros(3, 8, 8), "label": torch.zeros(1)}) == 1


def test_lists():
    assert count_samples([1, 2, 3]) == 3
    assert count_samples((["a", "b"], ["c", "d"])) == 2
    assert count_samples([]) == 0
    assert count_samples({"text": ["a", "b", "c"], "id": [1, 2, 3]}) == 3


def test_scalars_and_objects():
    assert count_samples(3) == 1
    assert count_samples(torch.tensor(2.0)) == 1
    assert count_samples(object()) == 1
