"""TF cluster backend: one process per worker, each with its TF_CONFIG (MultiWorkerMirroredStrategy)."""

from __future__ import annotations

from operators.plan import Process, RunLayout, Stage
from operators.spec import Spec


def train_stage(spec: Spec, layout: RunLayout, module: list[str], threads: int) -> Stage:
    argv = (*module, "trainer.train", "--spec", layout.spec_file, "--data", layout.data_dir,
            "--checkpoints", layout.checkpoint_dir, "--result", layout.train_result)
    env = {"TFDIST_THREADS": str(threads)}
    workers = tuple(
        Process("worker", i, argv, env, gpus=spec.training.gpus_per_worker) for i in range(spec.training.num_workers)
    )
    return Stage("train", workers, tf_cluster=True)
