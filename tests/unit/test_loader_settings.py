"""The one DataLoader-settings type: its keyword arguments, JSON, labels and the model's view."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipecheck.codec import from_jsonable, to_jsonable
from pipecheck.loader_settings import TORCH_DEFAULT_PREFETCH_FACTOR, LoaderSettings
from pipecheck.records import TuneSection


@st.composite
def loader_settings(draw) -> LoaderSettings:
    workers = draw(st.integers(0, 32))
    return LoaderSettings(
        num_workers=workers,
        prefetch_factor=draw(st.none() | st.integers(1, 16)) if workers else None,
        persistent_workers=draw(st.booleans()) and workers > 0,
        pin_memory=draw(st.none() | st.booleans()),
        in_order=draw(st.none() | st.booleans()),
        batch_size=draw(st.none() | st.integers(1, 4096)))


@given(loader_settings())
def test_the_json_and_the_dict_round_trip(settings):
    assert LoaderSettings.from_dict(settings.to_dict()) == settings
    assert to_jsonable(settings) == settings.to_dict()
    assert from_jsonable(LoaderSettings, to_jsonable(settings), ranges=True) == settings


@given(loader_settings())
def test_keyword_arguments_hold_only_what_torch_takes(settings):
    kwargs = settings.to_kwargs()
    assert kwargs["num_workers"] == settings.num_workers
    with_workers = {"prefetch_factor", "persistent_workers"}
    assert with_workers <= set(kwargs) if settings.num_workers else not with_workers & set(kwargs)
    for name in ("pin_memory", "in_order", "batch_size"):
        assert (name in kwargs) == (getattr(settings, name) is not None)


@given(loader_settings())
def test_the_models_view_compares_by_what_the_settings_do(settings):
    view = settings.model_view()
    assert view.in_order is settings.delivers_in_order
    assert view.pin_memory is None and view.batch_size is None
    assert view == LoaderSettings(settings.num_workers, settings.prefetch_factor,
                                  settings.persistent_workers,
                                  in_order=settings.in_order is not False).model_view()
    assert view.effective_prefetch_factor() == (
        0 if not settings.num_workers
        else settings.prefetch_factor or TORCH_DEFAULT_PREFETCH_FACTOR)


def test_labels_every_field_set_and_as_a_dataloader_call():
    settings = LoaderSettings(2, 4, persistent_workers=False, in_order=False)
    assert settings.label() == "num_workers=2 prefetch_factor=4 persistent_workers=False " \
                               "in_order=False"
    assert settings.short_label() == "num_workers=2 prefetch_factor=4"
    assert LoaderSettings(0, pin_memory=True).short_label() == "num_workers=0 pin_memory=True"
    assert LoaderSettings(3, 2, True).short_label() == \
        "num_workers=3 prefetch_factor=2 persistent_workers=True"


def test_the_tune_sections_settings_keep_their_json_keys():
    """Tuning's settings always set ``pin_memory`` (the loader's own, a bool): the report's
    ``tune.start`` / ``tune.chosen`` keep the four keys they were written with, and an older
    report's settings read back equal."""
    start = LoaderSettings(num_workers=0, prefetch_factor=None, persistent_workers=False,
                           pin_memory=False)
    section = TuneSection(status="settled", start=start, chosen=start)
    data = to_jsonable(section)
    assert data["start"] == {"num_workers": 0, "prefetch_factor": None,
                             "persistent_workers": False, "pin_memory": False}
    assert from_jsonable(TuneSection, data, ranges=True) == section
