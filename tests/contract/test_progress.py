"""The train stage's records (contract/progress.py): the training curve written whole by each process, and the
checkpoint state file made for the checkpoints a store keeps."""

from __future__ import annotations

import pytest

from tests.dag.test_dag_parse import run_python
from tfdist.contract.progress import CurveWrite, checkpoint_state, curve_line, kept_checkpoints, read_curve
from tfdist.contract.train_records import CurvePoint


def point(step: int, loss: float) -> bytes:
    """The curve's line of a point at ``step``."""
    return curve_line(CurvePoint(step=step, loss=loss, examples_per_sec=None))


def test_a_state_file_made_for_the_checkpoints_a_store_keeps_reads_back_as_them():
    state = checkpoint_state(["ckpt-20", "ckpt-40"], 1795853616.5)
    assert state.splitlines()[0] == 'model_checkpoint_path: "ckpt-40"'
    assert kept_checkpoints(state) == ["ckpt-20", "ckpt-40"]


@pytest.mark.e2e
def test_a_processs_curve_writes_follow_the_points_before_its_first(tmp_path):
    """Each write holds the lines the file held before the process's first write (a line cut short by a crash
    dropped), then all the process's own: a later write covers an earlier one."""
    path = str(tmp_path / "curve.jsonl")
    earlier = b"".join(point(step, 1.0) for step in (10, 20))
    with open(path, "wb") as f:
        f.write(earlier + b'{"step": 30, "lo')  # the last training died while writing
    run_python(f"""
        from tfdist.contract.progress import CurveWrite, curve_line
        from tfdist.contract.train_records import CurvePoint
        lines = b""
        for step in (30, 40):
            lines += curve_line(CurvePoint(step=step, loss=0.5, examples_per_sec=None))
            CurveWrite({path!r}, lines)()
    """)
    assert [(p.step, p.loss) for p in read_curve(path)] == [(10, 1.0), (20, 1.0), (30, 0.5), (40, 0.5)]
    with open(path, "rb") as f:
        assert f.read().count(b"\n") == 4
    CurveWrite(path, point(50, 0.2))()  # another process: this one
    assert [p.step for p in read_curve(path)] == [10, 20, 30, 40, 50]
