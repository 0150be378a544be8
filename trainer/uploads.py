"""Uploads to the object store in a process of their own (``python -m tfdist.trainer.uploads``): the training never
waits for the store, and the uploads' Python (HTTP, signing, hashing) never takes the training process's GIL.

The upload process is started by command, not by ``multiprocessing``: a spawned child imports its parent's main
module again, and a stage's main module imports TensorFlow (about 3 s of CPU, while the training starts, before the
first upload could run). It makes the store's file system at once, at the training's priority, then takes the idle
priority (``idle_priority``).

Its protocol: the jobs arrive pickled on its stdin, a None after the last; it writes a job's failure to the pipe
named on its command line. Its stdout is the training's."""

from __future__ import annotations

import atexit
import collections
import contextlib
import math
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO

from tfdist.infra import storage
from tfdist.infra.stopping import end_with_parent
from tfdist.trainer.runtime import end_done, say

UPLOAD_PATIENCE = 600.0
"""Seconds an upload retries a store it cannot reach (with backoff) before the stage fails."""


FAILURE_BYTES = 4096
"""The most bytes of a failure's message: written at once (a pipe's atomic write), read at once."""


Job = Callable[[], None]
"""An upload: a picklable call (a module-level function, or a partial of one), run in the upload process."""

Item = tuple[Job, str, str] | None
"""What the upload process receives: a job, what the logs call it and its key; None after the last."""


def retried(job: Job, what: str, patience: float = UPLOAD_PATIENCE) -> None:
    """Run ``job`` until it succeeds, waiting 0.5 s, 1 s, ... up to 15 s between tries, for ``patience`` seconds;
    then raise its last error. A missing local file or a refused permission is not retried."""
    deadline, wait = time.monotonic() + patience, 0.5
    while True:
        try:
            return job()
        except (FileNotFoundError, PermissionError):
            raise
        except Exception as exc:
            if time.monotonic() + wait > deadline:
                raise
            say(f"{what}: {type(exc).__name__}: {exc}; trying again in {wait:.1f}s")
            time.sleep(wait)
            wait = min(wait * 2, 15.0)


class Pace:
    """Which uploads are due: of each kind the first, the last, and between them at most one per ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.queued = seconds, dict[str, float]()

    def due(self, kind: str, last: bool) -> bool:
        """Whether an upload of ``kind`` is due now (then noted as queued)."""
        now = time.monotonic()
        if not last and now - self.queued.get(kind, -math.inf) < self.seconds:
            return False
        self.queued[kind] = now
        return True


class Uploader:
    """Runs uploads to the store of ``store_url`` in order, in the upload process. Each job is ``retried``; one
    that later jobs of the same key make needless (``needless``) is skipped (and ``discard``-ed, if it has that
    method); after one fails for good the rest are skipped and ``check`` and ``close`` raise. The upload process
    ends with this one, whatever it had left to upload (the checkpoint state is uploaded last: never a partial
    one): at once when this one exits, within ``STOP_GRACE_SECONDS`` when it is killed."""

    def __init__(self, store_url: str) -> None:
        self.failures, written = os.pipe()
        os.set_blocking(self.failures, False)
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, store_url, str(written)], stdin=subprocess.PIPE, pass_fds=(written,)
        )
        os.close(written)
        atexit.register(self.process.kill)  # a no-op once it ended
        self.failure: str | None = None

    def submit(self, job: Job, what: str, key: str | None = None) -> None:
        """Queue ``job``, which the logs call ``what``; its ``key`` (``what`` if none) names the jobs later ones
        make needless (``needless``). Raise if the upload process ended before its time."""
        self._send((job, what, key or what))

    def _send(self, item: Item) -> None:
        jobs: IO[bytes] = self.process.stdin  # type: ignore[assignment]  # stdin=PIPE
        try:
            pickle.dump(item, jobs)
            jobs.flush()
        except BrokenPipeError:
            self.process.wait()
            self.check()

    def check(self) -> None:
        """Raise if an upload failed for good, or the upload process ended before its time."""
        code = self.process.poll()  # first: once it ended, whatever it wrote is in the pipe
        if self.failure is None:
            with contextlib.suppress(BlockingIOError):
                self.failure = os.read(self.failures, FAILURE_BYTES).decode(errors="replace") or None
        if self.failure is None and code not in (None, 0):
            self.failure = f"the upload process ended (exit code {code})"
        if self.failure:
            raise OSError(self.failure)

    def close(self) -> None:
        """Wait for every upload submitted; raise if one failed."""
        self._send(None)
        self.process.wait()
        self.check()


def receive(stream: IO[bytes], items: queue.SimpleQueue[Item]) -> None:
    """Move the pickled items of ``stream`` into ``items`` as they arrive (the sender never waits for a busy upload
    process); the stream's end (the sender gone) ends them as a None does."""
    try:
        while (item := pickle.load(stream)) is not None:
            items.put(item)
    except EOFError:
        pass
    items.put(None)


def needless(job: Job, key: str, waiting: collections.deque[Item]) -> bool:
    """Whether the jobs of ``key`` queued after ``job`` make it needless: as many as its ``needless_after`` (1 if
    it has none: a tree's upload uploads the tree as it is when it runs, a record's write writes it whole; a
    checkpoint's upload is needless only behind ``keep_checkpoints`` later ones, whose state no longer keeps it)."""
    later = sum(1 for item in waiting if item is not None and item[2] == key)
    return later >= getattr(job, "needless_after", 1)


def run_jobs(items: queue.SimpleQueue[Item], failures: int) -> None:
    """Run each job in turn until the None that ends them, skipping all after a failure (written to ``failures``)
    and a job the later ones queued make ``needless``: what the store ends with is what running every job would
    leave."""
    failed, waiting = False, collections.deque[Item]()
    while True:
        if not waiting:
            waiting.append(items.get())
        while waiting[-1] is not None:
            try:
                waiting.append(items.get_nowait())
            except queue.Empty:
                break
        if (item := waiting.popleft()) is None:
            return
        job, what, key = item
        if failed or needless(job, key, waiting):
            if discard := getattr(job, "discard", None):
                discard()
            continue
        try:
            retried(job, what)
        except Exception as exc:
            failed = True
            os.write(failures, f"{what} failed: {type(exc).__name__}: {exc}".encode()[:FAILURE_BYTES])


def idle_priority(pid: int = 0) -> None:
    """Run every thread of process ``pid`` (this one by default) only on a core nothing else wants (SCHED_IDLE; any
    process may lower its own): the uploads take what the training leaves, and a training thread that wakes takes
    its core back at once. On Linux a policy is a thread's, and those started before would keep theirs (the file
    system's I/O loop, which makes the requests). The bench's upload-heavy training: 0.92 (0.91–0.92) of its local
    rate, against 0.91 (0.80–0.95) at niceness 19."""
    for thread in os.listdir(f"/proc/{pid or 'self'}/task"):
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile
            os.sched_setscheduler(int(thread), os.SCHED_IDLE, os.sched_param(0))


def main() -> None:
    store_url, failures = sys.argv[1], int(sys.argv[2])
    end_with_parent()
    storage.filesystem(store_url)  # made before the first upload, at the training's priority
    idle_priority()
    items: queue.SimpleQueue[Item] = queue.SimpleQueue()
    threading.Thread(target=receive, args=(sys.stdin.buffer, items), daemon=True).start()
    run_jobs(items, failures)
    end_done()


if __name__ == "__main__":
    main()
