"""Run under torchrun: 3 DDP steps on each rank's half of fixed global batches; rank 0 saves
the parameters and a few API facts for the test to compare with one process."""

import sys

import torch
from torch import nn
from torch.utils.data import TensorDataset

import scaletrain

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from reference import GLOBAL_BATCH, global_batches, tiny_model  # noqa: E402

out = sys.argv[1]
with scaletrain.init(strategy="ddp", seed=0) as run:
    model = tiny_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer = run.setup(model, optimizer)
    share = GLOBAL_BATCH // run.world_size
    for inputs, targets in global_batches():
        mine = slice(run.rank * share, (run.rank + 1) * share)
        run.train_step(model, optimizer, inputs[mine], targets[mine], nn.functional.cross_entropy)
    # 7 held-out samples on 2 ranks: the padded sample must not be counted.
    gen = torch.Generator().manual_seed(1)
    held_out = TensorDataset(torch.randn(7, 8, generator=gen), torch.randint(0, 3, (7,), generator=gen))
    evaluation = run.evaluate(model, held_out, batch_size=2)
    facts = {"mean_of_rank": run.mean(float(run.rank)), "sum_of_one": run.sum(1.0), "evaluation": evaluation,
             "world_size": run.world_size, "launcher": run.env.launcher}
    loader = run.loader(TensorDataset(torch.arange(10).float()), batch_size=5, shuffle=True)
    facts["epochs"] = [torch.cat([b[0] for b in loader]).tolist() for _ in range(2)]
    if run.is_main:
        torch.save({"params": {k: v.detach().clone() for k, v in run.unwrap(model).state_dict().items()},
                    "facts": facts}, out)
