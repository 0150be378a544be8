"""operators/dag.py: spec → DAG (its tasks in order, its tags and description), a folder of spec files → DAGs, an
invalid spec file → a paused DAG that says why. Whole DAGs under Airflow: tests/dag/."""

from __future__ import annotations

import gc

import pytest
import yaml
from airflow.sdk.exceptions import AirflowFailException

from tests.support.specs import make_spec
from tfdist.operators.dag import _cyclic_gc_paused, build_dag, build_dags_from_directory


def test_a_specs_dag_chains_its_stages_and_carries_its_tags_and_a_description(tmp_path):
    dag = build_dag(make_spec(str(tmp_path), tags=["team-a"]))
    order, task = [], dag.get_task("prepare_data")
    while task is not None:
        order.append(task.task_id)
        (task,) = [dag.get_task(t) for t in task.downstream_task_ids] or [None]
    assert order == ["prepare_data", "validate_data", "train", "evaluate", "export"]
    assert dag.tags == {"tfdist", "team-a"}
    assert dag.description == "Distributed TensorFlow training of digits_small"
    assert type(dag.timetable).__name__ == "CronDataIntervalTimetable"


def write(folder, name: str, spec) -> None:
    (folder / name).write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec))


def test_a_spec_file_that_fails_is_a_dag_under_its_name_when_free_else_its_files_stem(tmp_path):
    write(tmp_path, "a.yaml", make_spec(str(tmp_path), name="team_a"))
    write(tmp_path, "b.yml", make_spec(str(tmp_path), name="team_b", training={"num_workers": 0}))
    write(tmp_path, "c d.yaml", make_spec(str(tmp_path), name="team_a", training={"num_workers": 0}))
    write(tmp_path, "e.yaml", "- not\n- a mapping\n")
    write(tmp_path, "notes.txt", "not a spec")
    dags = build_dags_from_directory(tmp_path)
    assert sorted(dags) == ["invalid_spec.c_d", "invalid_spec.e", "team_a", "team_b"]
    assert [t.task_id for t in dags["team_b"].tasks] == ["invalid_spec"]
    assert dags["team_b"].dag_display_name == "team_b (INVALID SPEC b.yml)"
    assert "training.num_workers" in dags["invalid_spec.c_d"].description
    assert len(dags["team_a"].tasks) == 5


def test_an_invalid_specs_dag_is_paused_unscheduled_and_its_task_fails_with_the_problems(tmp_path):
    write(tmp_path, "broken.yaml", make_spec(str(tmp_path), name="broken", training={"num_workers": 0}))
    dag = build_dags_from_directory(tmp_path)["broken"]
    assert (dag.is_paused_upon_creation, type(dag.timetable).__name__) == (True, "NullTimetable")
    assert "`training.num_workers: Input should be greater than or equal to 1 (got 0)`" in dag.doc_md
    with pytest.raises(AirflowFailException, match=r"training\.num_workers"):
        dag.get_task("invalid_spec").execute({})
    assert dag.get_task("invalid_spec").retries == 0


def test_the_garbage_collector_is_paused_while_building_and_restored_as_it_was():
    assert gc.isenabled()
    with _cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with _cyclic_gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
