"""The private parts of torch.utils.data that pipecheck relies on (pipecheck/_torch_compat.py),
checked against the installed torch: if a torch release moves them, these fail first."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from pipecheck import _torch_compat as compat
from transparency_datasets import CountingLoader, Numbers


class Tens(Numbers):
    def __getitem__(self, index: int) -> int:
        return 10 * index


def test_the_installed_torch_builds_iterators_through_get_iterator():
    assert compat.HAS_ITERATOR_HOOK, f"torch {torch.__version__} has no DataLoader._get_iterator"


def test_substitutes_reach_the_iterator_only_and_the_copy_keeps_its_class_checks():
    loader = CountingLoader(Numbers(8), batch_size=4)
    copy_ = compat.private_copy(loader)
    substitutes = compat.substitute_while_iterating(copy_, {"dataset": Tens(8)})
    assert isinstance(copy_, CountingLoader) and copy_.dataset is loader.dataset
    assert [b.tolist() for b in copy_] == [[0, 10, 20, 30], [40, 50, 60, 70]]  # the substitute
    assert copy_.dataset is loader.dataset and substitutes.calls == 1
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # the original as it was
    assert compat.substitutes_of(copy_) is substitutes and compat.substitutes_of(loader) is None


def test_in_place_registration_leaves_other_loaders_alone():
    measured, plain = DataLoader(Numbers(8), batch_size=4), DataLoader(Numbers(8), batch_size=4)
    substitutes = compat.register_in_place(measured, {"dataset": Tens(8)})
    assert [b.tolist() for b in measured] == [[0, 10, 20, 30], [40, 50, 60, 70]]
    assert [b.tolist() for b in plain] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert measured.dataset.n == 8 and substitutes.calls == 1
    assert compat.substitutes_of(measured, in_place=True) is substitutes


@pytest.mark.parametrize("workers,in_order,expected", [
    (2, True, None), (1, True, "fewer than 2 workers"), (0, True, "_task_info"),
    (2, False, "in_order=False")])
def test_head_of_line_state_is_where_pipecheck_reads_it(workers, in_order, expected):
    kwargs = {"in_order": in_order} if "in_order" in DataLoader.__init__.__code__.co_varnames \
        else {}
    if not in_order and not kwargs:
        pytest.skip("this torch has no in_order")
    iterator = iter(DataLoader(Numbers(16), batch_size=2, num_workers=workers, **kwargs))
    reason = compat.head_of_line_unsupported(iterator)
    if expected is None:
        assert reason is None
        info, head = compat.awaited_batch(iterator)
        assert isinstance(info, dict) and head == 0
    else:
        assert expected in reason
    del iterator


def test_the_main_process_fetcher_is_where_sampling_points_it():
    from pipecheck._torch_compat import main_process_fetcher

    loader = DataLoader(list(range(8)), batch_size=2)
    fetcher = main_process_fetcher(iter(loader))
    assert fetcher is not None and fetcher.dataset is loader.dataset
    assert fetcher.collate_fn is loader.collate_fn
    assert main_process_fetcher(iter(DataLoader(list(range(8)), num_workers=1))) is None
    assert main_process_fetcher(iter([1, 2])) is None
