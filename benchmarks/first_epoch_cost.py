"""pipecheck's cost over a whole first epoch on the fastest loader (TensorDataset, batch_size=1,
num_workers=0): process CPU time per batch, plain vs wrapped (host sampler off, every other
probe on), best of 5 fresh loaders each. Complements ``overhead.py``'s interleaved chunks with
whole epochs, which include the per-epoch set-up.

    python benchmarks/first_epoch_cost.py LABEL
"""

import time
import torch
import sys
from torch.utils.data import TensorDataset, DataLoader
import pipecheck
torch.set_num_threads(1)
ds = TensorDataset(torch.randn(20000, 8), torch.randint(0, 10, (20000,)))
def first_epoch(wrap):
    best = 1e9
    for _ in range(5):
        loader = DataLoader(ds, batch_size=1)
        if wrap:
            loader = pipecheck.wrap(loader, host=False)
        started = time.process_time()
        for _ in loader:
            pass
        best = min(best, time.process_time() - started)
        if wrap:
            loader.close()
    return best / 20000 * 1e6


plain, wrapped = first_epoch(False), first_epoch(True)
label = sys.argv[1] if len(sys.argv) > 1 else "this checkout"
print(f"{label}: plain {plain:.2f} us, wrapped first epoch {wrapped:.2f} us, cost "
      f"{wrapped - plain:.2f} us/batch ({(wrapped / plain - 1) * 100:+.1f}%)")
