"""DAG files parse fast without TensorFlow; invalid specs become Airflow import errors naming the field."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import yaml

from tests.support.roots import REPO
from tests.support.specs import make_spec

pytestmark = pytest.mark.e2e  # starts Airflow's DAG parsing in fresh interpreters


def run_python(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-P", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False", **env},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_example_dags_parse_without_tensorflow_and_without_what_only_a_running_task_needs():
    """Parsing builds the DAG from the spec; the plan, the contract and the launchers wait until a task runs (with
    Airflow's default lazy plugins every parse would import them anew)."""
    out = run_python("""
        import runpy, sys
        for path in ("dags/digits_nightly.py", "dags/yaml_specs.py"):
            runpy.run_path(path)
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "horovod"))
        print("HEAVY", heavy)
        parts = ("tfdist.contract", "tfdist.infra", "tfdist.publishing", "tfdist.operators.plan",
                 "tfdist.operators.launchers", "tfdist.trainer")
        print("RUNTIME", sorted(m for m in sys.modules if m.startswith(parts)))
    """)
    assert "HEAVY []" in out and "RUNTIME []" in out


def test_dagbag_loads_both_examples_with_four_tasks():
    out = run_python("""
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder="dags")
        assert not bag.import_errors, bag.import_errors
        for dag_id in sorted(bag.dag_ids):
            dag = bag.dags[dag_id]
            print(dag_id, [t.task_id for t in dag.topological_sort()], type(dag.timetable).__name__)
    """)
    assert (
        "digits_mlp ['prepare_data', 'validate_data', 'train', 'evaluate', 'export'] CronDataIntervalTimetable" in out
    )
    assert (
        "digits_nightly ['prepare_data', 'validate_data', 'train', 'evaluate', 'export'] CronDataIntervalTimetable"
        in out
    )


def test_a_broken_yaml_spec_never_hides_the_others(tmp_path):
    """Two valid specs keep their DAGs; the broken one and a duplicate name each become a paused DAG with
    no schedule whose description names the file and the problem, and whose one task fails with it."""
    dags = tmp_path / "dags"
    (dags / "specs").mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "dags", "yaml_specs.py"), dags)
    for name, sections in {"team_a": {}, "team_b": {}, "team_c": {"training": {"num_workers": 0}}}.items():
        spec = make_spec(str(tmp_path), name=name, **sections)
        (dags / "specs" / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    (dags / "specs" / "z_copy.yaml").write_text(yaml.safe_dump(make_spec(str(tmp_path), name="team_a")))
    out = run_python(f"""
        import json
        from airflow.dag_processing.dagbag import DagBag
        from airflow.sdk.exceptions import AirflowFailException
        bag = DagBag(dag_folder={str(dags)!r})
        assert not bag.import_errors, bag.import_errors
        for dag_id, dag in sorted(bag.dags.items()):
            failure = None
            if dag.has_task("invalid_spec"):
                try:
                    dag.get_task("invalid_spec").execute({{}})
                except AirflowFailException as exc:
                    failure = str(exc)
            print("DAG", json.dumps([dag_id, type(dag.timetable).__name__, dag.is_paused_upon_creation,
                                     dag.description, sorted(t.task_id for t in dag.tasks), failure]))
    """)
    found = {row[0]: row[1:] for row in (json.loads(line[4:]) for line in out.splitlines() if line.startswith("DAG "))}
    assert sorted(found) == ["invalid_spec.z_copy", "team_a", "team_b", "team_c"]
    for valid in ("team_a", "team_b"):
        assert found[valid][0] == "CronDataIntervalTimetable" and len(found[valid][3]) == 5
    timetable, paused, description, tasks, failure = found["team_c"]
    assert (timetable, paused, tasks) == ("NullTimetable", True, ["invalid_spec"])
    problem = "training.num_workers: Input should be greater than or equal to 1 (got 0)"
    assert "team_c.yaml" in description and problem in description and problem in failure
    assert "name: 'team_a' is already the name of team_a.yaml" in found["invalid_spec.z_copy"][2]


def readme_dag_file() -> str:
    """The README's example pipeline file, exactly as shown."""
    readme = open(os.path.join(REPO, "README.md")).read()
    start = readme.index("```python\n", readme.index("## Writing a pipeline")) + len("```python\n")
    return readme[start : readme.index("```", start)]


def test_a_dag_file_written_as_the_readme_shows_is_found_in_safe_mode(tmp_path):
    (tmp_path / "pipeline.py").write_text(readme_dag_file())
    out = run_python(f"""
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder={str(tmp_path)!r}, safe_mode=True)
        print("DAGS", sorted(bag.dag_ids), bag.import_errors)
    """)
    assert "DAGS ['digits_cnn'] {}" in out


def test_with_plugins_loaded_airflow_itself_imports_and_warms_the_dag_builder_but_not_tensorflow():
    # AIRFLOW__CORE__LAZY_LOAD_PLUGINS=False (conftest, Makefile): what the dag-processor has before it forks a parse
    out = run_python("""
        import sys
        import airflow.sdk
        from tfdist.operators.params import _properties
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "horovod"))
        print("dag" if "tfdist.operators.dag" in sys.modules else "no dag", _properties.cache_info().currsize, heavy)
    """)
    state, schemas, heavy = out.split(maxsplit=2)
    assert state == "dag" and int(schemas) >= 10 and heavy.strip() == "[]", out


def test_with_plugins_loaded_a_parse_imports_nothing_the_dag_processor_could_have_imported_before_it_forks():
    """The forked parse of an example DAG file imports no tfdist module, and not the Asset URI handlers' imports
    (boto3 and botocore through the Amazon provider's, ~300 modules): the plugin made an Asset before the fork."""
    out = run_python("""
        import runpy, sys
        import airflow.sdk
        from airflow.utils.file import iter_airflow_imports
        import importlib
        for path in ("dags/digits_nightly.py", "dags/yaml_specs.py"):
            for module in iter_airflow_imports(path):  # as the dag-processor does before it forks
                importlib.import_module(module)
        before = set(sys.modules)
        for path in ("dags/digits_nightly.py", "dags/yaml_specs.py"):
            runpy.run_path(path)
        print(sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("tfdist", "boto3", "botocore")))
    """)
    assert out.strip() == "[]", out
