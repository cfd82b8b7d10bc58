"""A streaming script as the README's library section writes one, without
`if __name__ == "__main__":`, reading with two DataLoader workers per rank. Under a start
method that re-runs the script in every worker (spawn) it would fail; as torchrun starts a
rank (the platform's default, fork on Linux) every sample is read exactly once. Rank 0
prints every sample any rank read: `SEEN [..]`."""
import json

import torch
from torch.utils.data import IterableDataset

import scaletrain

SAMPLES = 96


class Numbers(IterableDataset):
    def __iter__(self):
        for i in range(SAMPLES):
            yield torch.tensor([float(i)])


with scaletrain.init(strategy="ddp", pin=False) as run:
    read = [int(x) for batch in run.loader(Numbers(), batch_size=4, num_workers=2) for x in batch.flatten().tolist()]
    every = run.gather(torch.tensor(read)).tolist()
    run.print("SEEN " + json.dumps(sorted(every)))
