"""Loaders rebuilt every epoch (validation loaders, per-epoch datasets) under ``pipecheck.wrap``
and ``pipecheck run``: worker processes and memory stay as flat as without pipecheck, and an
unmodified script over user classes with class hooks runs and exits as it does unmeasured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from paths import SUPPORT

EPOCHS = 20

REBUILD = textwrap.dedent("""
    import gc, json, sys
    import psutil
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Squares(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, index):
            return torch.tensor([index * index])

    def main():
        mode, epochs = sys.argv[1], int(sys.argv[2])
        me = psutil.Process()
        children, rss = [], []
        for epoch in range(epochs):
            # A validation loader built, iterated and dropped every epoch.
            val = DataLoader(Squares(), batch_size=8, num_workers=2, persistent_workers=True)
            if mode == "wrap":
                import pipecheck
                val = pipecheck.wrap(val, host_interval_s=0.1)
            total = sum(int(batch.sum()) for batch in val)
            assert total == sum(i * i for i in range(64)), total
            del val
            gc.collect()
            children.append(len(me.children(recursive=True)))
            rss.append(me.memory_info().rss)
        print(json.dumps({"children": children, "rss": rss}), flush=True)

    if __name__ == "__main__":
        main()
""")


def _run(argv: list[str], cwd) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SUPPORT), env.get("PYTHONPATH", "")])
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith('{"children"'))
    return json.loads(line)


@pytest.mark.slow
def test_loaders_rebuilt_every_epoch_leave_no_workers_and_no_memory_behind(tmp_path):
    script = tmp_path / "rebuild.py"
    script.write_text(REBUILD)
    plain = _run([sys.executable, str(script), "plain", str(EPOCHS)], tmp_path)
    wrapped = _run([sys.executable, str(script), "wrap", str(EPOCHS)], tmp_path)
    measured = _run([sys.executable, "-m", "pipecheck", "run", "--", sys.executable,
                     str(script), "plain", str(EPOCHS)], tmp_path)
    # No worker process outlives its loader: as many alive after each epoch as unmeasured
    # (before: one more persistent pool per epoch under `pipecheck run`).
    assert max(plain["children"]) == 0
    assert max(wrapped["children"]) == 0 and max(measured["children"]) == 0
    # Memory: the growth over the last 15 epochs stays within 8 MiB of the unmeasured run's
    # (a loader's workers and its dataset are tens of MiB; what pipecheck keeps is records).
    def growth(run: dict) -> int:
        return run["rss"][-1] - run["rss"][4]

    assert growth(wrapped) <= growth(plain) + 8 * 2**20, (growth(plain), growth(wrapped))
    assert growth(measured) <= growth(plain) + 8 * 2**20, (growth(plain), growth(measured))


CLASS_HOOKS = textwrap.dedent("""
    import gc, sys
    import torch
    from torch.utils.data import DataLoader
    import user_classes as uc

    def main():
        path = sys.argv[1]
        closing = uc.ClosingDataset(path)
        for epoch in range(3):
            for dataset in (uc.Squares(16), uc.SlottedDataset(16), uc.MetaDataset(16), closing):
                loader = uc.ReleasingLoader(dataset, batch_size=4, num_workers=2)
                assert len(list(loader)) == 4
                del loader
            gc.collect()
        assert closing[3] == 3 and not closing.file.closed
        assert uc.CREATED["Squares"] == 3 and uc.CREATED["ReleasingLoader"] == 12
        assert uc.DELETED.get("ClosingDataset", 0) == 0
        assert uc.Squares.__subclasses__() == [] and uc.ReleasingLoader.__subclasses__() == []
        print("ok", flush=True)
        sys.exit(7)

    if __name__ == "__main__":
        main()
""")


@pytest.mark.slow
def test_an_unmodified_script_over_hooked_classes_runs_and_exits_as_unmeasured(tmp_path):
    script = tmp_path / "hooks.py"
    script.write_text(CLASS_HOOKS)
    data = tmp_path / "bytes.bin"
    data.write_bytes(bytes(range(16)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SUPPORT), env.get("PYTHONPATH", "")])
    outcomes = []
    for argv in ([sys.executable, str(script), str(data)],
                 [sys.executable, "-m", "pipecheck", "run", "--json", str(tmp_path / "r.json"),
                  "--", sys.executable, str(script), str(data)]):
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env=env)
        outcomes.append((done.returncode, done.stdout.splitlines()[:1]))
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert outcomes[0] == outcomes[1] == (7, ["ok"])
    assert (tmp_path / "r.json").exists()
