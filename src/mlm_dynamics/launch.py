"""Launching a sharded sweep on several processes (GPUs or CPU cores) with Lightning Fabric.

On one node the workers are spawned (``ddp_spawn``: gloo on CPU, NCCL on CUDA) and the launching process merges the
shards (:mod:`mlm_dynamics.experiments.distributed`); each worker exits when the launching process does, so an
interrupted sweep leaves no process behind. Across nodes the cluster starts the processes and Fabric reads their
ranks from the environment (SLURM, torchrun); global rank 0 merges into the shared ``OUT``::

    srun --nodes 4 --ntasks-per-node 8 --gpus-per-node 8 \\
        mlm-dynamics sweep --config sweep-bert-gpu --out /shared/sweep --devices 8 --num-nodes 4
"""

from __future__ import annotations

import os
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
from lightning.fabric import Fabric

from .experiments.checkpoint import RunInterrupted
from .experiments.config import SweepConfig
from .experiments.distributed import merge_shards, run_shard
from .experiments.sweep import SweepResult


def run_sweep_sharded(config: SweepConfig, out_dir: Path, *, devices: int, num_nodes: int = 1, resume: bool = False,
                      progress: bool = False) -> SweepResult | None:
    """Run the sweep's cells on ``devices`` processes per node (``num_nodes`` nodes); the merged result on the process
    that merges, ``None`` on the others (see the module docstring)."""
    config.validate()
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ValueError(f"--devices must be an integer >= 1, got {devices!r}")
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise ValueError(f"--num-nodes must be an integer >= 1, got {num_nodes!r}")
    cuda = torch.device(config.model.device).type == "cuda"
    fabric = Fabric(accelerator="cuda" if cuda else "cpu", devices=devices, num_nodes=num_nodes,
                    strategy="ddp_spawn" if num_nodes == 1 else "ddp")
    try:
        fabric.launch(partial(_worker, config=config, out_dir=out_dir, resume=resume, progress=progress,
                              devices=devices, parent=os.getpid()))
    except KeyboardInterrupt:
        raise RunInterrupted(" while the shards ran") from None
    if fabric.global_rank != 0:
        return None
    return merge_shards(config, out_dir, fabric.world_size)


def _worker(fabric: Any, *, config: SweepConfig, out_dir: Path, resume: bool, progress: bool, devices: int,
            parent: int) -> None:
    if os.getpid() != parent:  # a spawned worker ends with the process that launched it
        threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    torch.set_num_threads(max(1, torch.get_num_threads() // devices))  # the node's cores shared by its processes
    device = str(fabric.device) if config.model.device.startswith("cuda") else None
    run_shard(config, out_dir, rank=fabric.global_rank, world=fabric.world_size, device=device, resume=resume,
              progress=progress)
    fabric.barrier()


def _exit_with(parent: int) -> None:
    """Exit this process once ``parent`` is gone (it was interrupted or killed)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(130)


__all__ = ["run_sweep_sharded"]
