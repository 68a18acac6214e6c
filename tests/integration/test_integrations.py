"""The framework callbacks, with the real Lightning and transformers packages training a tiny
model built here (no downloads). Marked ``integrations``; skipped when the package is missing
(``pip install -e ".[integrations]"`` installs both)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import pipecheck
from pipecheck.report import load

pytestmark = pytest.mark.integrations

SAMPLE_S = 0.002
"""Each sample sleeps this long: a batch of 4 waits >= 8 ms for data, which the report must show."""
SAMPLES = 24
BATCH_SIZE = 4
EPOCHS = 2


class _Slow(Dataset):
    """Regression samples; ``as_dict`` gives the Hugging Face layout (``x``, ``labels``)."""

    def __init__(self, as_dict: bool = False) -> None:
        self.as_dict = as_dict

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int):
        time.sleep(SAMPLE_S)
        x = torch.full((4,), index / SAMPLES)
        y = x.sum().reshape(1)
        return {"x": x, "labels": y} if self.as_dict else (x, y)


def test_import_pipecheck_does_not_import_the_frameworks():
    code = ("import sys, pipecheck; "
            "print(any(m.split('.')[0] in ('lightning', 'pytorch_lightning', 'transformers') "
            "for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False"


def _tiny_lightning_module(pl, train_loader, val_loaders=()):
    """A one-layer regression module over the given loaders; ``steps`` counts training steps,
    ``seen`` keeps each training batch's inputs (for comparing runs batch by batch)."""

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)
            self.steps = 0
            self.seen: list[torch.Tensor] = []
            self.val_steps = 0

        def training_step(self, batch, batch_idx):
            self.steps += 1
            x, y = batch
            self.seen.append(x.clone())
            return torch.nn.functional.mse_loss(self.linear(x), y)

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.val_steps += 1
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.linear(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return train_loader()

    if val_loaders:
        Tiny.val_dataloader = lambda self: [make() for make in val_loaders]
    return Tiny()


def _trainer(pl, callbacks, **options):
    settings = dict(max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, callbacks=callbacks)
    settings.update(options)
    return pl.Trainer(**settings)


@pytest.mark.slow
def test_lightning_callback_measures_the_train_dataloader(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from pipecheck.integrations.lightning import PipecheckCallback

    callback = PipecheckCallback(tmp_path / "run.json", host_interval_s=0.2)
    model = _tiny_lightning_module(
        pl, lambda: DataLoader(_Slow(), batch_size=BATCH_SIZE, num_workers=1))
    _trainer(pl, [callback]).fit(model)
    saved = load(tmp_path / "run.json")
    batches = EPOCHS * SAMPLES // BATCH_SIZE
    assert model.steps == batches  # training saw every batch, through the wrapper
    assert saved.consumer.batches == batches and saved.consumer.epochs == EPOCHS
    assert saved.consumer.samples == EPOCHS * SAMPLES
    assert (saved.loader.num_workers, saved.loader.batch_size) == (1, BATCH_SIZE)
    assert saved.producer.probe != "none" and len(saved.producer.workers) == 1
    assert saved.producer.workers[0].batches == batches  # the worker probe timed each batch
    assert callback.report.consumer.batches == batches
    # Lightning stops each epoch by counting batches, never calling next() past the last one:
    # the run still completed, and every epoch is closed.
    assert saved.consumer.status == "complete"
    assert all(e.ended != "running" for e in saved.timeline.epochs)
    assert "did not complete" not in str(callback.report)


@pytest.mark.slow  # the default run's Lightning tests cover the callback, validation included
def test_lightning_callback_reports_each_validation_dataloader_after_the_train_one(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from pipecheck.integrations.lightning import PipecheckCallback

    val_sizes = (2, 3)  # batch sizes of the two validation loaders: 12 and 8 batches a run
    callback = PipecheckCallback(tmp_path / "run.json", host_interval_s=0.2)
    model = _tiny_lightning_module(
        pl, lambda: DataLoader(_Slow(), batch_size=BATCH_SIZE, num_workers=1),
        [lambda size=size: DataLoader(_Slow(), batch_size=size, num_workers=0)
         for size in val_sizes])
    _trainer(pl, [callback]).fit(model)  # with Lightning's 2-batch sanity check first
    train = load(tmp_path / "run.json")
    assert train.consumer.batches == EPOCHS * SAMPLES // BATCH_SIZE
    assert callback.reports[0].consumer.batches == train.consumer.batches  # train first
    assert len(callback.validation_reports) == len(val_sizes)
    val_batches = [EPOCHS * (SAMPLES // size) for size in val_sizes]  # sanity check excluded
    assert model.val_steps == sum(val_batches) + 2 * len(val_sizes)
    for index, size in enumerate(val_sizes):
        name = "run.val.json" if index == 0 else f"run.val.loader{index}.json"
        saved = load(tmp_path / name)
        assert saved.loader.batch_size == size
        assert saved.consumer.batches == val_batches[index]
        assert saved.consumer.epochs == EPOCHS and saved.consumer.status == "complete"
        assert saved.consumer.samples == EPOCHS * SAMPLES
        assert saved.producer.workers[0].batches == val_batches[index]
        assert callback.validation_reports[index].consumer.batches == val_batches[index]


@pytest.mark.slow  # a tuned Lightning fit, about 4 s
def test_lightning_callback_tunes_the_train_dataloader_only(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from pipecheck.analysis.choice import NOISE_BLOCKS
    from pipecheck.integrations.lightning import PipecheckCallback
    from pipecheck.tune import TuneLimits

    def train_loader():
        return DataLoader(_Slow(), batch_size=BATCH_SIZE, shuffle=True,
                          generator=torch.Generator().manual_seed(1))

    epochs = 4  # 6-batch epochs: each trial's window of 4 batches waits for the next epoch
    plain = _tiny_lightning_module(pl, train_loader)
    _trainer(pl, [], max_epochs=epochs).fit(plain)
    limits = TuneLimits(min_batches=2, min_seconds=0.0, warmup_batches=0,
                        max_blocks=NOISE_BLOCKS, budget_fraction=1.0)
    callback = PipecheckCallback(tmp_path / "run.json", host_interval_s=0.2, tune=limits)
    tuned = _tiny_lightning_module(
        pl, train_loader, [lambda: DataLoader(_Slow(), batch_size=BATCH_SIZE)])
    _trainer(pl, [callback], max_epochs=epochs).fit(tuned)
    # The same batches in the same order as without pipecheck, through the trials' switches
    # and in later epochs (Lightning ends each epoch by count, never past the last batch).
    assert len(tuned.seen) == len(plain.seen) == epochs * SAMPLES // BATCH_SIZE
    assert all(torch.equal(a, b) for a, b in zip(tuned.seen, plain.seen))
    section = load(tmp_path / "run.json").tune
    assert section is not None and section.status in ("settled", "tuning"), section
    assert len({t.settings for t in section.trials}) >= 2, section  # tried more than the start
    assert all(r.tune is None for r in callback.validation_reports)  # never tuned


def test_lightning_callback_leaves_validation_alone_when_asked(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from pipecheck.integrations.lightning import PipecheckCallback

    callback = PipecheckCallback(tmp_path / "run.json", validation=False, host_interval_s=0.2)
    model = _tiny_lightning_module(
        pl, lambda: DataLoader(_Slow(), batch_size=BATCH_SIZE),
        [lambda: DataLoader(_Slow(), batch_size=BATCH_SIZE)])
    trainer = _trainer(pl, [callback], max_epochs=1)
    trainer.fit(model)
    assert callback.validation_reports == [] and not (tmp_path / "run.val.json").exists()
    assert not isinstance(trainer.val_dataloaders, pipecheck.WrappedLoader)
    assert callback.report.consumer.status == "complete"


def test_transformers_callback_measures_the_train_dataloader(tmp_path):
    pytest.importorskip("accelerate")
    transformers = pytest.importorskip("transformers")
    from pipecheck.integrations.transformers import PipecheckCallback

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x, labels=None):
            out = self.linear(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    callback = PipecheckCallback(tmp_path / "run.json", host_interval_s=0.2)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH_SIZE,
        num_train_epochs=EPOCHS, report_to=[], save_strategy="no", logging_strategy="no",
        use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
    trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=_Slow(as_dict=True),
                                   callbacks=[callback])
    trainer.train()
    saved = load(tmp_path / "run.json")
    batches = EPOCHS * SAMPLES // BATCH_SIZE
    assert trainer.state.global_step == batches
    assert saved.consumer.batches == batches and saved.consumer.epochs == EPOCHS
    assert saved.consumer.samples == EPOCHS * SAMPLES
    # accelerate rebuilds the DataLoader around a batch sampler, so batch_size reads None
    assert saved.loader.num_workers == 0 and saved.loader.dataset_len == SAMPLES
    # each batch's samples sleep in the main process, inside next(): all of it is data wait
    assert saved.consumer.wait_s >= 0.9 * EPOCHS * SAMPLES * SAMPLE_S
    assert saved.producer.workers[0].batches == batches  # the main-process probe timed each
    assert saved.consumer.status == "complete"  # after a normal train()
    # the Trainer's loader holds its own DataLoader again afterwards
    assert type(trainer.callback_handler.train_dataloader.base_dataloader) is DataLoader


_CRASHING_TRAINER = """
import sys, torch, transformers
from torch.utils.data import Dataset
from pipecheck.integrations.transformers import PipecheckCallback

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
    def forward(self, x, labels=None):
        out = self.linear(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

class BreaksAt(Dataset):
    def __len__(self):
        return 40
    def __getitem__(self, index):
        if index == 21:
            raise OSError("corrupt sample 21")
        x = torch.full((4,), index / 40.0)
        return {"x": x, "labels": x.sum().reshape(1)}

args = transformers.TrainingArguments(
    output_dir=sys.argv[1] + "/out", per_device_train_batch_size=4, num_train_epochs=1,
    report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
    dataloader_num_workers=0)
trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=BreaksAt(),
                               callbacks=[PipecheckCallback(sys.argv[1] + "/run.json")])
trainer.train()
"""


@pytest.mark.slow
def test_transformers_callback_saves_what_was_measured_when_training_raises(tmp_path):
    pytest.importorskip("accelerate")
    pytest.importorskip("transformers")
    done = subprocess.run([sys.executable, "-c", _CRASHING_TRAINER, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "corrupt sample 21" in done.stderr
    saved = load(tmp_path / "run.json")
    # Sequential sampling: batches 0-4 (samples 0-19) arrived, the sixth raised in next().
    assert saved.consumer.batches == 5 and saved.consumer.samples == 20
    assert saved.timeline.epochs[-1].ended == "error"


class _Indexed(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int):
        x = torch.full((4,), float(index))
        return x, x.sum().reshape(1)


@pytest.mark.parametrize("workers", [0, 2])
def test_lightning_callback_checkpoints_a_stateful_dataloader_mid_epoch(tmp_path, workers):
    """Lightning saves a torchdata StatefulDataLoader's state_dict() in its checkpoints and
    resumes mid-epoch from it. Through the callback's wrapper the saved state must be that of
    the batches training got: the resumed run goes on with exactly the rest of the epoch the
    checkpointed run saw, as it does without pipecheck."""
    pl = pytest.importorskip("lightning.pytorch")
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    from pipecheck.integrations.lightning import PipecheckCallback

    def make_loader():
        return stateful.StatefulDataLoader(_Indexed(), batch_size=BATCH_SIZE, shuffle=True,
                                           num_workers=workers,
                                           generator=torch.Generator().manual_seed(3))

    def epoch_and_resumed(measured: bool) -> tuple[list, list]:
        where = tmp_path / ("measured" if measured else "plain")
        checkpoints = pl.callbacks.ModelCheckpoint(dirpath=where, filename="{step}",
                                                   every_n_train_steps=5, save_top_k=-1)
        extra = [PipecheckCallback(None, host_interval_s=0.2)] if measured else []
        first = _tiny_lightning_module(pl, make_loader)
        _trainer(pl, [checkpoints, *extra], max_epochs=1,
                 enable_checkpointing=True).fit(first)
        again = _tiny_lightning_module(pl, make_loader)
        extra = [PipecheckCallback(None, host_interval_s=0.2)] if measured else []
        _trainer(pl, extra, max_epochs=1).fit(again, ckpt_path=where / "step=5.ckpt")
        return ([batch[:, 0].tolist() for batch in first.seen],
                [batch[:, 0].tolist() for batch in again.seen])

    epoch, resumed = epoch_and_resumed(measured=False)
    assert len(epoch) == 16 and resumed == epoch[5:]  # what Lightning does without pipecheck
    epoch, resumed = epoch_and_resumed(measured=True)
    assert len(epoch) == 16 and resumed == epoch[5:]


@pytest.mark.parametrize("workers", [0, 2])
def test_lightning_callback_leaves_the_shuffle_and_the_worker_starts_as_they_were(tmp_path,
                                                                                   workers):
    """The callback wraps the train loader before Lightning creates the first epoch's iterator:
    no extra iterator over the user's loader draws a seed from the RNG (which would reshuffle
    every epoch) or starts its workers."""
    pl = pytest.importorskip("lightning.pytorch")
    from pipecheck.integrations.lightning import PipecheckCallback

    iterators: list[int] = []

    class Counting(DataLoader):
        def __iter__(self):
            iterators.append(1)
            return super().__iter__()

    def fit(callbacks):
        iterators.clear()
        pl.seed_everything(7, verbose=False)
        model = _tiny_lightning_module(
            pl, lambda: Counting(_Slow(), batch_size=BATCH_SIZE, shuffle=True,
                                 num_workers=workers))
        _trainer(pl, callbacks).fit(model)
        return model.seen, len(iterators)

    plain, plain_iterators = fit([])
    measured, measured_iterators = fit([PipecheckCallback(tmp_path / "run.json")])
    assert len(measured) == len(plain) == EPOCHS * SAMPLES // BATCH_SIZE
    assert all(torch.equal(a, b) for a, b in zip(plain, measured))
    assert measured_iterators == plain_iterators == EPOCHS
    assert load(tmp_path / "run.json").consumer.batches == len(plain)


@pytest.mark.parametrize("workers", [0, 2])
def test_lightning_callback_trains_bit_for_bit_as_without_it_validation_included(tmp_path,
                                                                                 workers):
    """Shuffled train and validation loaders, with workers, seeded: the losses, the validation
    losses and the trained parameters are identical with and without the callback, and each
    loader builds as many iterators (an extra one draws a base seed from the global RNG and
    starts the workers twice)."""
    pl = pytest.importorskip("lightning.pytorch")
    from pipecheck.integrations.lightning import PipecheckCallback

    built = {"train": 0, "val": 0}

    class Scaled(_Indexed):  # small inputs: SGD at lr 0.1 stays finite
        def __getitem__(self, index: int):
            x, y = super().__getitem__(index)
            return x / 64, y / 64

    class Counting(DataLoader):
        def __init__(self, role, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.role = role

        def __iter__(self):
            built[self.role] += 1
            return super().__iter__()

    class Logged(pl.Callback):
        def __init__(self):
            self.losses = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.losses.append(float(outputs["loss"]))

        def on_validation_epoch_end(self, trainer, pl_module):
            if not trainer.sanity_checking:
                self.losses.append(float(trainer.callback_metrics["val_loss"]))

    def fit(callbacks):
        built.update(train=0, val=0)
        pl.seed_everything(11, verbose=False)
        logged = Logged()
        model = _tiny_lightning_module(
            pl, lambda: Counting("train", Scaled(), batch_size=8, shuffle=True,
                                 num_workers=workers),
            [lambda: Counting("val", Scaled(), batch_size=8, shuffle=True,
                              num_workers=workers)])
        _trainer(pl, [logged, *callbacks], max_epochs=3).fit(model)
        params = [p.detach().clone() for p in model.parameters()]
        return logged.losses, params, dict(built)

    plain_losses, plain_params, plain_built = fit([])
    losses, params, measured_built = fit([PipecheckCallback(tmp_path / "run.json")])
    assert losses == plain_losses and len(losses) == 3 * 8 + 3
    assert all(torch.equal(a, b) for a, b in zip(params, plain_params))
    assert measured_built == plain_built
    val = load(tmp_path / "run.val.json")
    assert val.consumer.batches == 3 * 8 and val.consumer.epochs == 3


@pytest.mark.parametrize("workers", [0, 2])
def test_transformers_callback_trains_and_evaluates_bit_for_bit_as_without_it(tmp_path,
                                                                               workers):
    pytest.importorskip("accelerate")
    transformers = pytest.importorskip("transformers")
    from pipecheck.integrations.transformers import PipecheckCallback

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x, labels=None):
            out = self.linear(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    class Pairs(_Indexed):
        def __getitem__(self, index: int):
            x, y = super().__getitem__(index)
            return {"x": x / 64, "labels": y / 64}

    def train(callbacks, out):
        transformers.set_seed(5)
        args = transformers.TrainingArguments(
            output_dir=str(out), per_device_train_batch_size=8, per_device_eval_batch_size=8,
            num_train_epochs=2, eval_strategy="epoch", report_to=[], save_strategy="no",
            logging_strategy="steps", logging_steps=1, use_cpu=True, disable_tqdm=True,
            dataloader_num_workers=workers, seed=5)
        trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=Pairs(),
                                       eval_dataset=Pairs(), callbacks=callbacks)
        trainer.train()
        losses = [(e.get("loss"), e.get("eval_loss")) for e in trainer.state.log_history
                  if "loss" in e or "eval_loss" in e]
        return losses, [p.detach().clone() for p in trainer.model.parameters()]

    plain_losses, plain_params = train([], tmp_path / "plain")
    losses, params = train([PipecheckCallback(tmp_path / "run.json")], tmp_path / "measured")
    assert losses == plain_losses and len(losses) == 2 * 8 + 2
    assert all(torch.equal(a, b) for a, b in zip(params, plain_params))
    assert load(tmp_path / "run.json").consumer.batches == 2 * 8
