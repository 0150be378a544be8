"""Process setup shared by every stage: the spec, TensorFlow threading, progress output."""

from __future__ import annotations

import atexit
import contextlib
import errno
import importlib.abc
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NoReturn

from tfdist.contract.launch import CORES_ENV, THREADS_ENV
from tfdist.infra.jsonfiles import read_json
from tfdist.infra.stopping import end_with_parent

if TYPE_CHECKING:
    from tfdist.spec import Spec


def load_spec(path: str) -> Spec:
    """The run's effective spec: its ``spec.json`` (``Spec.to_json_dict()``, written by the operator) validated
    again. Read as JSON, not YAML: YAML 1.1 reads a number such as ``1e-05`` as a string. The spec model is
    imported here: the upload process (trainer/uploads.py) imports this module and never needs it."""
    from tfdist import spec

    return spec.load_spec(read_json(path), f"spec file {path}")


def pin_to_own_cores() -> None:
    """Pin this process to its cores (TFDIST_CORES: '0' or '2,3'; for Horovod ranks one block per local rank,
    ';'-separated). Called before TensorFlow starts its threads, which inherit the main thread's cores."""
    blocks = os.environ.get(CORES_ENV, "").split(";")
    local_rank = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK") or os.environ.get("HOROVOD_LOCAL_RANK") or 0)
    own = blocks[local_rank] if local_rank < len(blocks) else ""
    if own:
        os.sched_setaffinity(0, [int(core) for core in own.split(",")])


def usable_cores() -> int:
    """This process's cores: its CPU set, within a container's CPU quota (cgroup v2 ``cpu.max``) if any."""
    cores = len(os.sched_getaffinity(0))
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cores


def memory_limit() -> tuple[int, str]:
    """(bytes this process may use, where that figure comes from): its cgroup's memory limit (v2 ``memory.max``,
    v1 ``memory.limit_in_bytes``) where one is below the physical memory, else the physical memory."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                limit = f.read().strip()
        except OSError:
            continue
        if limit.isdigit() and int(limit) < physical:
            return int(limit), f"the limit of its cgroup, {path}"
    return physical, "the machine's physical memory"


KERAS_OPTIONAL_IMPORTS = ("sklearn", "matplotlib")
"""What Keras imports at its own import when installed, for its scikit-learn wrappers and its plots, which no stage
uses: 1.2 s of a process's 4 s start (CPU, measured here with both installed)."""


class HiddenModules(importlib.abc.MetaPathFinder):
    """While on ``sys.meta_path``: importing any of ``names`` (or their submodules) not yet imported raises
    ModuleNotFoundError."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"{fullname}: not imported while TensorFlow starts", name=fullname)


@contextlib.contextmanager
def hidden_modules(names: tuple[str, ...]) -> Iterator[None]:
    """Meanwhile, importing any of ``names`` not yet imported fails; afterwards they import again."""
    finder = HiddenModules(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def import_tensorflow():
    """Import TensorFlow and Keras (without Keras's optional imports) on this process's cores (TFDIST_CORES)
    with its thread budget (TFDIST_THREADS) applied before any op runs."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    pin_to_own_cores()
    with hidden_modules(KERAS_OPTIONAL_IMPORTS):
        import keras  # noqa: F401  (imported here, while its optional imports are hidden)
        import tensorflow as tf

    threads = int(os.environ.get(THREADS_ENV, "0"))
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads(threads))
    return tf


def inter_op_threads(threads: int) -> int:
    """Inter-op threads for a budget of ``threads``: up to 2, and 2 in a parameter-server cluster, whose ps tasks
    run every worker's updates at once and whose workers wait on ps reads between their own ops (one thread each
    trained 7% slower: CTR bench, 5 processes on 2 cores, docs/performance.md)."""
    return 2 if "ps" in tf_config().get("cluster", {}) else min(2, threads)


def tf_config() -> dict:
    """This process's TF_CONFIG (its TF cluster and task, from the launcher); empty outside a TF cluster."""
    return json.loads(os.environ.get("TF_CONFIG", "{}"))


def say(message: str) -> None:
    """One line, in one write: mpirun tags each write with its rank, so a line must not be split."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"ERROR: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def run_stage(main: Callable[[], None]) -> NoReturn:
    """Run a stage's ``main``, ended with its launching process, and end the process as soon as it is done
    (``end_done``); a full disk ends it with one line naming where (TensorFlow wraps the OS error in its own
    types, so its message is matched too) instead of a traceback."""
    end_with_parent()
    try:
        main()
        end_done()
    except Exception as exc:
        if getattr(exc, "errno", None) != errno.ENOSPC and "No space left on device" not in str(exc):
            raise
        named = re.search(r"(?:^|\s)(/[^\s;]+)", str(exc))  # TensorFlow's: '{{function_node …}} /path; No space …'
        where = getattr(exc, "filename", None) or (named.group(1) if named else "the artifact root")
        fail(
            f"no space left on the device holding {where}: free space under the artifact root (or move it to "
            "a larger volume) and retry the task; nothing partial was published"
        )


def end_done() -> NoReturn:
    """End a stage process whose work is done: its exit handlers run (Horovod's shutdown among them) and its
    output is flushed, but not the interpreter's teardown, which takes a process that imported TensorFlow about
    1 s here (docs/performance.md): a stage's result would wait for it."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
