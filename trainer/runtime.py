"""Process setup shared by every stage: arguments, the spec, TensorFlow threading, progress output."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from trainer.artifacts import read_json


def parse_args(description: str, *paths: str, extra: list[tuple[str, dict]] = ()) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--spec", required=True, help="the run's effective spec (spec.json)")
    for name in paths:
        parser.add_argument(f"--{name}", required=True)
    for name, options in extra:
        parser.add_argument(f"--{name}", **options)
    return parser.parse_args()


def load_spec(path: str) -> dict[str, Any]:
    return read_json(path)


def import_tensorflow():
    """Import TensorFlow with this process's thread budget (TFDIST_THREADS) applied before any op runs."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    threads = int(os.environ.get("TFDIST_THREADS", "0"))
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(min(2, threads))
    return tf


def say(message: str) -> None:
    """One line, in one write: mpirun tags each write with its rank, so a line must not be split."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def fail(message: str) -> None:
    print(f"ERROR: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)
