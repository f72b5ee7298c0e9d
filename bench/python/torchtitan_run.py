#!/usr/bin/env python3
"""torchtitan's own Trainer with gnmr's optimizer container swapped in
(gnmr.integrations.torchtitan), for a GPU session: torchtitan 0.3.0's
Trainer needs CUDA (docs/python.md, "At scale").

    torchrun --nproc_per_node N bench/python/torchtitan_run.py --gnmr gnmr \
        --module llama3 --config llama3_debugmodel --training.steps 50 ...

--gnmr PRESET (default: off, torchtitan's own AdamW) builds the same
param groups and implementation under GnmrOptimizersContainer with that
preset; --gnmr-overrides '{"tau": 3.0}' passes overrides (JSON). Every
other argument is torchtitan's (its ConfigManager parses them), so the two
arms differ only in the optimizer container. bench/torchtitan_gpu.sh runs
both arms and keeps their logs.
"""
import argparse
import json
import sys

import torch


def main() -> None:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--gnmr", default="")
    ap.add_argument("--gnmr-overrides", default="{}")
    ours, rest = ap.parse_known_args()

    from torchtitan.config import ConfigManager
    from torchtitan.tools.logging import init_logger, logger

    init_logger()
    config = ConfigManager().parse_args(rest)
    if ours.gnmr:
        from gnmr.integrations.torchtitan import GnmrOptimizersContainer

        base = config.optimizer
        config.optimizer = GnmrOptimizersContainer.Config(
            param_groups=base.param_groups, implementation=base.implementation,
            optimizer_factory_kwargs_by_name=base.optimizer_factory_kwargs_by_name,
            preset=ours.gnmr, overrides=json.loads(ours.gnmr_overrides))
        logger.info(f"gnmr: optimizer container guarded by preset {ours.gnmr!r}")
    trainer = config.build()
    try:
        trainer.train()
        if ours.gnmr and torch.distributed.get_rank() == 0:
            ctl = trainer.optimizers.controller
            logger.info(f"gnmr: {ctl.steps_done} controller steps, last summary "
                        f"{ctl.last_summary.as_dict() if ctl.last_summary else None}")
    finally:
        trainer.close()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
