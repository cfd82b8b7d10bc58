"""Under ddp on 2 processes: a second run.setup of one model is refused in one line; a
model never given to run.setup may be evaluated, but training it is refused (its copies
would drift apart). Rank 0 prints what happened; the last refusal is left uncaught."""
import torch
from torch import nn
from torch.utils.data import TensorDataset

import scaletrain
from scaletrain.foundation.errors import UsageError

with scaletrain.init(strategy="ddp", pin=False) as run:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prepared, optimizer = run.setup(model, optimizer)
    for again in (model, prepared):
        try:
            run.setup(again)
        except UsageError as exc:
            run.print(f"REFUSED setup twice: {exc}")
    stray = nn.Linear(4, 2)
    data = TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))
    run.print(f"EVALUATED {run.evaluate(stray, data, batch_size=4)['count']}")
    run.train_step(stray, torch.optim.SGD(stray.parameters(), lr=0.1), torch.randn(4, 4), torch.randint(0, 2, (4,)),
                   nn.functional.cross_entropy)
    run.print("TRAINED the stray model")  # never reached
