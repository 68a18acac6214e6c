"""An ``IterableDataset`` split by worker, feeding a tiny language model, with tokens/s.

What it shows:

* the usual worker split of an ``IterableDataset``: each DataLoader worker reads only its own
  slice of the documents (``get_worker_info()``), so no document is seen twice per epoch;
* batches that are dicts with ``input_ids`` and ``attention_mask``: pipecheck counts tokens
  from them on its own (``attention_mask.sum()``) and reports tokens/s next to samples/s;
* ``len()`` is not needed: an iterable loader is measured the same way as a map-style one.

The "documents" are generated in-process and tokenized with a toy hashing tokenizer (real CPU
work per document, nothing downloaded). Runs in a few seconds on two CPU cores::

    python examples/iterable_dataset.py
"""

from __future__ import annotations

import math
import random
import zlib

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import pipecheck

VOCAB = 512
SEQ_LEN = 64
WORDS = ("pipeline", "worker", "batch", "shard", "decode", "tensor", "epoch", "stall", "step",
         "loader", "prefetch", "queue", "memory", "core", "disk", "cache", "model", "token")


def tokenize(text: str) -> list[int]:
    """Toy tokenizer: each word hashed (CRC-32) into ``VOCAB`` ids; 0 is padding."""
    return [1 + zlib.crc32(word.encode()) % (VOCAB - 1) for word in text.split()]


class Documents(IterableDataset):
    """``count`` synthetic documents, tokenized and cut/padded to ``SEQ_LEN`` tokens.

    Worker ``k`` of ``n`` yields documents ``k, k+n, k+2n, ...``; without workers, all of them.
    """

    def __init__(self, count: int = 1024) -> None:
        self.count = count

    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if info is not None else (0, 1)
        for index in range(start, self.count, step):
            rng = random.Random(index)  # document `index` is the same in any worker
            words = rng.randrange(40, 400)
            text = " ".join(rng.choice(WORDS) + str(rng.randrange(40)) for _ in range(words))
            ids = tokenize(text)[:SEQ_LEN]
            mask = [1] * len(ids) + [0] * (SEQ_LEN - len(ids))
            yield {
                "input_ids": torch.tensor(ids + [0] * (SEQ_LEN - len(ids))),
                "attention_mask": torch.tensor(mask),
            }


class TinyLM(nn.Module):
    """Embedding, a causal convolution over the last 3 tokens, and a next-token head."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width, padding_idx=0)
        self.conv = nn.Conv1d(width, width, kernel_size=3, padding=2)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(input_ids).transpose(1, 2)  # (batch, width, time)
        hidden = torch.relu(self.conv(hidden)[..., : input_ids.shape[1]])  # drop the look-ahead
        return self.head(hidden.transpose(1, 2))


def main() -> None:
    loader = DataLoader(Documents(), batch_size=32, num_workers=2)
    loader = pipecheck.wrap(loader)  # tokens are counted from attention_mask automatically

    model = TinyLM()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(2):
        for batch in loader:
            ids, mask = batch["input_ids"], batch["attention_mask"]
            logits = model(ids[:, :-1])
            # Predict each next token; padding positions are ignored (-100).
            targets = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1),
                                               ignore_index=-100)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: last loss {loss.item():.3f} (uniform guess: {math.log(VOCAB):.3f})")

    print(loader.report())


if __name__ == "__main__":  # the guard matters: DataLoader workers may re-import this file
    main()
