"""The configurations the strategy checks run, for the devices a target has: every strategy,
mixed precision and compilation under ddp and fsdp, and the compositions of the mesh, each
with the devices it needs and what a machine with fewer cannot show. Pure data: no torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .target import Target

#: Parts a model is cut into on one process's devices at most (the tiny model has 4 blocks).
MAX_PARTS = 4


@dataclass(frozen=True)
class Case:
    name: str
    strategy: str
    world: int
    options: dict = field(default_factory=dict)
    model: str = "tiny"          # "tiny" (strategy_reference.py) or "gpt" (a tensor-parallel plan)
    needs: int = 0               # devices needed (default: one per process)
    shared_device: bool = False  # every process on the first device, over Gloo
    cannot_show: str = ""        # what a machine with too few devices does not show
    note: str = ""               # what this machine's run shows less of, though it runs

    @property
    def devices_needed(self) -> int:
        return self.needs or self.world

    @property
    def precision(self) -> str:
        return self.options.get("precision", "fp32")

    def launch(self) -> tuple:
        """Configurations with the same key run in one launch."""
        return self.world, self.shared_device

    def as_dict(self) -> dict:
        return asdict(self)


def cases(target: Target) -> list[Case]:
    cuda, n = target.device == "cuda", target.count
    # The devices one process drives: dp over every GPU; mp and hybrid cut into one part per GPU.
    parts = min(n, MAX_PARTS) if cuda else 2
    parts_x2 = max(1, min(n // 2, MAX_PARTS)) if cuda else 2
    one = cuda and n == 1
    local_note = {
        "dp": "one GPU: one replica; DataParallel's scatter and gather across GPUs not shown" if one else
              ("" if cuda else "the CPU is one device: DataParallel runs one replica"),
        "mp": "one GPU: one part; activations moving between GPUs not shown" if one else
              ("" if cuda else "every part on the CPU"),
    }
    across = "NCCL takes one GPU per process"
    found = [
        Case("single", "single", 1),
        Case("dp", "dp", 1, needs=1, note=local_note["dp"]),
        Case("mp", "mp", 1, {"devices_per_process": parts, "microbatches": 2}, needs=parts if cuda else 1,
             note=local_note["mp"]),
        Case("hybrid x1", "hybrid", 1, {"devices_per_process": parts, "microbatches": 2}, needs=parts if cuda else 1,
             note=local_note["mp"]),
        Case("ddp x1", "ddp", 1),
        Case("fsdp x1", "fsdp", 1),
        Case("pipeline x1", "pipeline", 1, {"microbatches": 2}, note="one stage"),
        *[Case(f"{s} x1 {p}", s, 1, {"precision": p}) for p in ("bf16", "fp16") for s in ("ddp", "fsdp")],
        *[Case(f"{s} x1 compile", s, 1, {"compile": True}) for s in ("single", "ddp", "fsdp")],
        Case("ddp x2 gloo, one device shared", "ddp", 2, needs=1, shared_device=True),
        Case("ddp x2", "ddp", 2, cannot_show=f"{across}: gradients all-reduced over NCCL between GPUs"),
        Case("fsdp x2", "fsdp", 2, cannot_show=f"{across}: parameters sharded across GPUs"),
        Case("pipeline x2 gpipe", "pipeline", 2, {"schedule": "gpipe", "microbatches": 2},
             cannot_show=f"{across}: 2 stages on 2 GPUs"),
        Case("pipeline x2 1f1b", "pipeline", 2, {"schedule": "1f1b", "microbatches": 4},
             cannot_show=f"{across}: 2 stages on 2 GPUs"),
        Case("hybrid x2", "hybrid", 2, {"devices_per_process": parts_x2, "microbatches": 2},
             needs=2 * parts_x2 if cuda else 2, cannot_show=f"{across}: DDP between split replicas"),
        *[Case(f"{s} x2 {p}", s, 2, {"precision": p}, cannot_show=f"{across}: {p} across GPUs")
          for p in ("bf16", "fp16") for s in ("ddp", "fsdp")],
        *[Case(f"{s} x2 compile", s, 2, {"compile": True}, cannot_show=f"{across}: compiled blocks under {s} across GPUs")
          for s in ("ddp", "fsdp")],
        Case("tp x2", "tp", 2, {"tp": 2}, model="gpt", cannot_show=f"{across}: tensor parallel"),
        Case("fsdp x4 tp 2 (FSDP x TP)", "fsdp", 4, {"tp": 2}, model="gpt",
             cannot_show=f"{across}: 2 shards x 2 tensor-parallel"),
        Case("fsdp x4 dp-replicate 2 dp-shard 2 (HSDP)", "fsdp", 4, {"dp_replicate": 2, "dp_shard": 2},
             cannot_show=f"{across}: 2 replicas x 2 shards"),
        Case("pipeline x4 pp 2 dp-shard 2 (pipeline x FSDP)", "pipeline", 4, {"pp": 2, "dp_shard": 2, "microbatches": 2},
             model="gpt", cannot_show=f"{across}: 2 stages x 2 shards"),
        # Context parallel: on one GPU two processes share it over Gloo, the sequences split between
        # them and attention round scaletrain's ring on CUDA tensors (through host memory); with a
        # GPU per process and NCCL, torch's own context-parallel attention runs instead.
        Case("fsdp x2 cp 2 gloo, one device shared", "fsdp", 2, {"cp": 2}, model="gpt", needs=1, shared_device=True,
             note="scaletrain's ring (Gloo through host memory), not torch's NCCL path" if cuda else ""),
        Case("fsdp x2 cp 2 bf16 gloo, one device shared", "fsdp", 2, {"cp": 2, "precision": "bf16"}, model="gpt",
             needs=1, shared_device=True),
        Case("fsdp x2 cp 2", "fsdp", 2, {"cp": 2}, model="gpt",
             cannot_show=f"{across}: torch's context-parallel attention, its ring over NCCL between GPUs"),
        Case("fsdp x4 dp-shard 2 cp 2 (FSDP x CP)", "fsdp", 4, {"dp_shard": 2, "cp": 2}, model="gpt",
             cannot_show=f"{across}: 2 shards x 2 context-parallel"),
        Case("tp x4 tp 2 cp 2 (CP x TP)", "tp", 4, {"tp": 2, "cp": 2}, model="gpt",
             cannot_show=f"{across}: 2 context-parallel x 2 tensor-parallel"),
        Case("pipeline x8 pp 2 dp-shard 2 tp 2 (3-D)", "pipeline", 8,
             {"pp": 2, "dp_shard": 2, "tp": 2, "microbatches": 2}, model="gpt",
             cannot_show=f"{across}: 2 stages x 2 shards x 2 tensor-parallel"),
    ]
    return found
