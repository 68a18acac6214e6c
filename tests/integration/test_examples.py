"""Every script in examples/ runs as a user would run it (a fresh interpreter, an empty working
folder) and prints a pipecheck report whose first line is the verdict."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pipecheck
from paths import REPO_ROOT

REPO = REPO_ROOT
EXAMPLES = REPO / "examples"
VERDICT_LINE = re.compile(r"^(INPUT-BOUND|COMPUTE-BOUND|BALANCED|NO-DATA): ", re.MULTILINE)
TIMEOUT_S = 120  # each takes 5-10 s on an idle 2-core machine; the margin is for a busy one


def run_example(name: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # Import pipecheck from this checkout even when it is not installed.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "100"  # a fixed width, so wrapped report lines do not depend on the host
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def verdicts(stdout: str) -> list[str]:
    return [m.group(1) for m in VERDICT_LINE.finditer(stdout)]


def test_every_example_is_tested():
    tested = {"wrap_dataloader.py", "iterable_dataset.py", "webdataset_pipeline.py",
              "plain_iterable.py", "stress_target.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


@pytest.mark.slow
def test_wrap_dataloader_prints_and_saves_the_report(tmp_path):
    done = run_example("wrap_dataloader.py", tmp_path)
    assert done.returncode == 0, done.stderr
    saved = pipecheck.load(tmp_path / "wrap_dataloader-report.json")
    assert saved.consumer.batches == 2 * 2048 // 64  # two epochs of 32 batches
    assert saved.consumer.epochs == 2
    assert saved.loader.num_workers == 2
    # The printed verdict is the one saved.
    assert verdicts(done.stdout) == [saved.diagnosis.verdict.upper()]


@pytest.mark.parametrize("name, batches, extra", [
    # 1024 documents / 32, two epochs
    pytest.param("iterable_dataset.py", 64, "tokens/s", marks=pytest.mark.slow),
    # 512 images / 16, two epochs
    pytest.param("webdataset_pipeline.py", 64, "WebLoader", marks=pytest.mark.slow),
    # 40 batches, two epochs; examples run as subprocesses, about 5 s each
    pytest.param("plain_iterable.py", 80, "RemoteBatchStream", marks=pytest.mark.slow),
])
def test_example_prints_a_report(tmp_path, name, batches, extra):
    done = run_example(name, tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(verdicts(done.stdout)) == 1, done.stdout
    assert f" {batches} batches " in done.stdout
    assert extra in done.stdout
    assert not list(tmp_path.iterdir()), "examples that do not save must leave no files behind"


@pytest.mark.slow
def test_stress_target_sweeps_its_own_factory(tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PIPECHECK_CACHE", str(tmp_path_factory.mktemp("cache")))
    done = run_example("stress_target.py", tmp_path, "--budget", "3")
    assert done.returncode == 0, done.stderr
    assert len(verdicts(done.stdout)) == 1, done.stdout
    text = " ".join(done.stdout.split())
    # the factory's own defaults (num_workers=0) are the baseline, measured first
    assert "Key figures" in text and re.search(r"baseline \(?num_workers=0", text)
    assert not list(tmp_path.iterdir()), "the shards go to the cache, not the working folder"
