"""Sample counting from batch structure."""

import numpy as np
import torch

from pipecheck.probes.batches import count_samples, counter_for


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


def test_batch_storage_counts_the_bytes_and_the_tensors_a_worker_hands_over():
    from pipecheck.probes.batches import batch_storage

    features = {f"f{i}": torch.zeros(64, 16) for i in range(8)}
    assert batch_storage(features) == (8 * 64 * 16 * 4, 8)
    pair = (torch.zeros(64, 3, 8, 8, dtype=torch.uint8), torch.arange(64))
    assert batch_storage(pair) == (64 * 3 * 8 * 8 + 64 * 8, 2)
    nested = {"x": [np.zeros(4, dtype=np.float32), torch.zeros(2)], "name": ["a", "b"]}
    assert batch_storage(nested) == (16 + 8, 2)
    assert batch_storage(["text only"]) == (None, 0)


def test_specialised_counters_agree_with_the_general_walk_and_fall_back_when_it_changes():
    tensors = (torch.zeros(32, 3), torch.zeros(32))
    mapping = {"input_ids": torch.zeros(8, 128, dtype=torch.long),
               "attention_mask": torch.ones(8, 128, dtype=torch.long), "id": "x"}
    labels_first = {"meta": ["a", "b"], "pixels": np.zeros((4, 3, 2, 2))}
    for first, later in ((tensors, (torch.zeros(5, 3), torch.zeros(5))),
                         (mapping, {"input_ids": torch.zeros(3, 9), "attention_mask": None}),
                         (labels_first, {"meta": ["a"], "pixels": np.zeros((7, 3))})):
        counter = counter_for(first)
        assert counter is not count_samples  # one leading dimension read, not the walk
        assert counter(first) == count_samples(first)
        assert counter(later) == count_samples(later)
    # A batch of another structure (the key gone, a list of plain items): the general walk.
    counter = counter_for(mapping)
    assert counter({"labels": torch.zeros(6)}) == 6
    assert counter([1, 2, 3]) == 3
