"""Where a process runs the model: its device (--device), torch's threads (--threads) and, under torchrun, its place
in the process group (Runtime). east-predict sets it up, and so does east-train for its run."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from east_cache.errors import UsageError

CPU = torch.device("cpu")


@dataclass(frozen=True)
class Runtime:
    device: torch.device = CPU
    rank: int = 0    # this process's place in the group; 0 logs and saves
    world: int = 1   # processes in the group (torchrun's WORLD_SIZE)

    def say(self, msg: str) -> None:
        """Print on rank 0 only."""
        if self.rank == 0:
            print(msg, flush=True)


def setup_threads(threads: int | None) -> None:
    """--threads N: torch's intra-op threads in this process (the model's CPU work; loader workers use one each).
    None leaves torch's default, one per core, which a machine shared with other jobs may want fewer of."""
    if threads is not None:
        torch.set_num_threads(threads)


def setup_device(name: str | None) -> Runtime:
    """Device, rank and world size; joins the process group when torchrun started several processes."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    name = name or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name}: not a device; pass cuda, cuda:N or cpu") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: no CUDA device here; pass --device cpu, or leave --device out")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                         f"cuda:0 to cuda:{torch.cuda.device_count() - 1}; pass one of them")
    if device.type == "cuda":
        device = torch.device("cuda", local if world > 1 else (device.index or 0))
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True  # fixed input size: let cuDNN pick the fastest kernels once
    if world > 1:
        # device_id binds the process's GPU to the group, so that NCCL collectives, barrier() included, use it
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world,
                                device_id=device if device.type == "cuda" else None)
    return Runtime(device, rank, world)
