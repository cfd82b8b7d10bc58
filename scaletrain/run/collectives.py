"""The collectives a training script needs beyond gradients, as methods of `Run`: sums and
means of metrics, every rank's values of a tensor, a barrier, and letting rank 0 go first
(downloading, unpacking, tokenising files the others then read)."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist


def _distributed() -> bool:
    return dist.is_initialized() and dist.get_world_size() > 1


class RunCollectives:
    """Mixed into Run: uses its `ctx`, `topology`, `device`, `is_main` and `watch`."""

    def _all_reduce(self, tensor: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
        if _distributed():
            with self.watch("all-reduce", tensor.numel() * tensor.element_size()):
                dist.all_reduce(tensor, op=op)
        return tensor

    def _as_tensor(self, value) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return value.detach().to(self.device, torch.float64).clone()
        return torch.tensor(value, dtype=torch.float64, device=self.device)

    def sum(self, value) -> float | torch.Tensor:
        """Sum of `value` over all ranks (a float in, a float out; a tensor in, a tensor out)."""
        out = self._all_reduce(self._as_tensor(value))
        return out if isinstance(value, torch.Tensor) else out.item()

    def mean(self, value) -> float | torch.Tensor:
        """Average of a metric across the processes that hold the model's outputs, e.g.
        `run.mean(loss)`: one per data-parallel shard (a pipeline's last stages; one of each
        group of tensor-parallel peers, which compute the same loss)."""
        mine = self._as_tensor(value)
        if not self.topology.reports_outputs:  # a pipeline's first stages; tensor-parallel peers count once
            mine = torch.zeros_like(mine)
        out = self._all_reduce(mine) / self.topology.output_reporters
        return out if isinstance(value, torch.Tensor) else out.item()

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's `tensor`, concatenated along the first dimension in rank order, on
        every rank (first dimensions may differ: predictions of unequal shares). For metrics
        you compute yourself over the whole data set."""
        tensor = tensor.detach()
        if not _distributed():
            return tensor.clone()
        with self.watch("gather"):
            rows = torch.tensor([tensor.shape[0] if tensor.dim() else 1], device=tensor.device)
            all_rows = [torch.zeros_like(rows) for _ in range(dist.get_world_size())]
            dist.all_gather(all_rows, rows)
            longest = int(max(r.item() for r in all_rows))
            flat = tensor.reshape(-1, *tensor.shape[1:]) if tensor.dim() else tensor.reshape(1)
            padded = torch.zeros((longest, *flat.shape[1:]), dtype=flat.dtype, device=flat.device)
            padded[:flat.shape[0]] = flat
            pieces = [torch.zeros_like(padded) for _ in range(dist.get_world_size())]
            dist.all_gather(pieces, padded)
        return torch.cat([piece[:int(n.item())] for piece, n in zip(pieces, all_rows)])

    def barrier(self) -> None:
        if _distributed():
            with self.watch("barrier"):
                dist.barrier()

    @contextlib.contextmanager
    def main_process_first(self):
        """Rank 0 runs the block first, the other ranks after it has finished (so they find
        the files it prepared):

            with run.main_process_first():
                dataset = load_or_prepare(path)
        """
        if not self.is_main:
            self.barrier()
        try:
            yield
        finally:
            if self.is_main:
                self.barrier()
