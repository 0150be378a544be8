"""DAG files parse fast without TensorFlow; invalid specs become Airflow import errors naming the field."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import yaml

from tests.conftest import REPO, make_spec


def run_python(code: str, **env: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            cwd=REPO, env={**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False", **env}, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_example_dags_parse_without_tensorflow():
    out = run_python("""
        import runpy, sys
        for path in ("dags/digits_nightly.py", "dags/yaml_specs.py"):
            runpy.run_path(path)
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "horovod"))
        print("HEAVY", heavy)
    """)
    assert "HEAVY []" in out


def test_dagbag_loads_both_examples_with_four_tasks():
    out = run_python("""
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder="dags")
        assert not bag.import_errors, bag.import_errors
        for dag_id in sorted(bag.dag_ids):
            dag = bag.dags[dag_id]
            print(dag_id, [t.task_id for t in dag.topological_sort()], type(dag.timetable).__name__)
    """)
    assert "digits_mlp ['prepare_data', 'train', 'evaluate', 'export'] CronDataIntervalTimetable" in out
    assert "digits_nightly ['prepare_data', 'train', 'evaluate', 'export'] CronDataIntervalTimetable" in out


def test_invalid_yaml_spec_is_an_import_error_naming_file_and_field(tmp_path):
    dags = tmp_path / "dags"
    (dags / "specs").mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "dags", "yaml_specs.py"), dags)
    (dags / "specs" / "broken.yaml").write_text(yaml.safe_dump(make_spec(str(tmp_path), training={"num_workers": 0})))
    out = run_python(f"""
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder={str(dags)!r})
        print(list(bag.import_errors.values()))
    """)
    assert "broken.yaml: training.num_workers: Input should be greater than or equal to 1 (got 0)" in out


def test_trigger_form_params_carry_the_spec_models_types_bounds_and_docs():
    from operators.dag import build_dag
    from operators.spec import load_spec

    spec = load_spec(make_spec("/tmp/tfdist-unused", overridable=["training.epochs", "training.backend"]))
    params = build_dag(spec).params
    epochs, backend = params.get_param("training.epochs"), params.get_param("training.backend")
    assert (epochs.value, epochs.schema["type"], epochs.schema["minimum"]) == (4, "integer", 1)
    assert epochs.description == "Passes over the training shards."
    assert backend.schema["enum"] == ["tf", "mpi"]
    assert backend.description == "'tf': a TF cluster from TF_CONFIG; 'mpi': Horovod ranks."


def test_with_plugins_loaded_airflow_itself_imports_and_warms_the_dag_builder_but_not_tensorflow():
    # AIRFLOW__CORE__LAZY_LOAD_PLUGINS=False (conftest, Makefile): what the dag-processor has before it forks a parse
    out = run_python("""
        import sys
        import airflow.sdk
        from operators.params import _properties
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "horovod"))
        print("dag" if "operators.dag" in sys.modules else "no dag", _properties.cache_info().currsize, heavy)
    """)
    state, schemas, heavy = out.split(maxsplit=2)
    assert state == "dag" and int(schemas) >= 10 and heavy.strip() == "[]", out
