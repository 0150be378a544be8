"""tfdist installed as a platform team installs it: the wheel built from this tree (``python -m build``), installed
(not editable) with the constraints file and the extras the README names into a fresh virtual environment (or
into a team's existing Airflow, the oldest release in the package's range), beside a team's Airflow project that
has its own ``plugins/operators/`` package and a DAG using it. Nothing of tfdist is
copied into the team's folders; Airflow finds the plugin and the provider through the package's entry points.
Then the deployment that copies files: the package uninstalled, its ``tfdist/`` folder and the thin plugin file in
a plugins folder, the plugin registered once from there."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.dag.test_dag_parse import readme_dag_file
from tests.packaging.test_packaging import pinned, pyproject
from tests.publishing.versions import published_metadata
from tests.support.roots import REPO
from tests.support.specs import DAY
from tfdist.operators.demo import write_digits_partitions

pytestmark = [pytest.mark.e2e, pytest.mark.extended]

NOTIFY = '''"""The team's own operator, in its plugins folder as plugins/operators/notify.py."""
from airflow.sdk import BaseOperator

from hooks.chat import ChatHook


class NotifyOperator(BaseOperator):
    def __init__(self, message: str, **kwargs):
        super().__init__(**kwargs)
        self.message = message

    def execute(self, context):
        return ChatHook().post(self.message)
'''
CHAT = '''"""The team's own hook, as plugins/hooks/chat.py."""


class ChatHook:
    def post(self, message: str) -> str:
        print(f"team chat: {message}")
        return message
'''
TEAM_DAG = '''"""The team's own Airflow DAG, importing its operator from its plugins folder."""
import pendulum
from airflow.sdk import DAG

from operators.notify import NotifyOperator

with DAG("team_etl", schedule=None, start_date=pendulum.datetime(2026, 11, 1, tz="UTC")):
    NotifyOperator(task_id="notify", message="etl done")
'''
TEAM_FILES = {
    "plugins/operators/__init__.py": "",
    "plugins/operators/notify.py": NOTIFY,
    "plugins/hooks/__init__.py": "",
    "plugins/hooks/chat.py": CHAT,
    "dags/team_etl.py": TEAM_DAG,
}


def readme_install_extras(component: str) -> str:
    """The extras of the README's ``pip install`` line under the comment naming ``component``."""
    readme = open(os.path.join(REPO, "README.md")).read()
    section = readme[readme.index("## Install into an existing Airflow") : readme.index("## Writing a pipeline")]
    return re.search(
        rf"# {re.escape(component)}.*?\npip install \"airflow-tfdist\[([\w,]+)\]\" --constraint "
        r"constraints\.txt",
        section,
        re.S,
    )[1]


def build_wheel(tree: str, out: str) -> str:
    """The wheel of this tree's files (tracked and new, as a checkout has them), built by ``python -m build``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if os.path.exists(source := os.path.join(REPO, name)):
            os.makedirs(os.path.dirname(os.path.join(tree, name)), exist_ok=True)
            shutil.copy2(source, os.path.join(tree, name), follow_symlinks=False)  # a link stays one, as checked out
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", out, tree], check=True, capture_output=True, text=True
    )
    (wheel,) = os.listdir(out)
    return os.path.join(out, wheel)


class Project:
    """The team's Airflow project with its own virtual environment."""

    def __init__(self, root: str, venv: str, artifacts: str) -> None:
        self.root, self.bin = root, os.path.join(venv, "bin")
        self.env = {
            # bytecode caches written as a deployment writes them: the install leaves the compiling to the imports
            **{
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("AIRFLOW", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE"))
            },
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "AIRFLOW_HOME": os.path.join(root, "airflow_home"),
            "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(root, "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(root, "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
            "TFDIST_ARTIFACT_ROOT": artifacts,
        }

    def run(self, *argv: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [os.path.join(self.bin, argv[0]), *argv[1:]],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"{argv}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        return done.stdout

    def json(self, *argv: str) -> list[dict]:
        return json.loads(self.run("airflow", *argv, "-o", "json").strip().splitlines()[-1])

    def files(self) -> set[str]:
        return {
            os.path.relpath(os.path.join(d, f), self.root)
            for d, _, names in os.walk(self.root)
            for f in names
            if "__pycache__" not in d and "airflow_home" not in d
        }


def oldest_airflow() -> str:
    """The oldest Airflow release the package's range admits (``>=3.3``: 3.3.0)."""
    requirement = next(
        r
        for r in map(Requirement, pyproject()["project"]["optional-dependencies"]["airflow"])
        if r.name == "apache-airflow"
    )
    lower = Version(next(s.version for s in requirement.specifier if s.operator == ">="))
    return f"{lower.major}.{lower.minor}.{lower.micro}"


def team_constraints(venv: str, path: str) -> str:
    """constraints.txt for what tfdist adds to a team's environment: its pins of what the team has left out."""
    frozen = subprocess.run(
        [os.path.join(venv, "bin", "pip"), "freeze"], capture_output=True, text=True, check=True
    ).stdout
    installed = {canonicalize_name(line.split("==")[0]) for line in frozen.split()}
    with open(os.path.join(REPO, "constraints.txt")) as f:
        kept = [line for line in f if canonicalize_name(line.split("==")[0]) not in installed]
    with open(path, "w") as f:
        f.writelines(kept)
    return path


def pip_install(venv: str, *args: str) -> None:
    """pip install, leaving the byte-compiling to the imports (45 of 140 s of the install here): the project's
    processes write their bytecode caches (Project.env)."""
    done = subprocess.run(
        [os.path.join(venv, "bin", "pip"), "install", "-q", "--no-compile", *args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    """The wheel built from this tree, once for the module."""
    built = tmp_path_factory.mktemp("wheel")
    return build_wheel(str(built / "tree"), str(built / "dist"))


def test_the_wheel_ships_the_pages_files_and_not_its_tools(wheel):
    """Every file the plugin serves for the page (page.html, page.css, each ES module), none of the JavaScript tools
    (node_modules/, package.json, eslint.config.js) nor their tests."""
    from tfdist.operators.web.api import PAGE_FILES

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    page = {name for name in names if name.startswith("tfdist/operators/web/") and not name.endswith(".py")}
    assert page == {f"tfdist/operators/web/{name}" for name in PAGE_FILES}
    assert not [n for n in names if "node_modules" in n or n.endswith(("package.json", "eslint.config.js", ".mjs"))]


@pytest.mark.parametrize("team_airflow", [None, "oldest"], ids=["constraints", "oldest-airflow-in-range"])
def test_the_wheel_installs_beside_a_team_project_and_runs_the_readme_pipeline(tmp_path, wheel, team_airflow):
    """``constraints``: installed with constraints.txt, the tested set; the team's own DAG runs beside tfdist's, and
    the deployment that copies files works. ``oldest-airflow-in-range``: into a team's existing Airflow, the oldest
    release the package admits, which the install leaves as it is; the README's pipeline runs from the wheel."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    top_level = {name.split("/")[0] for name in names}
    assert {name for name in top_level if not name.endswith(".dist-info")} == {"tfdist"}
    assert "tfdist/spec/tfdist-spec.schema.json" in names  # the spec's JSON Schema, for editors (package data)

    venv = str(tmp_path / "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    constraints = os.path.join(REPO, "constraints.txt")
    if team_airflow:  # the team's Airflow, resolved as pip resolves it today
        pip_install(venv, f"apache-airflow=={oldest_airflow()}")
        constraints = team_constraints(venv, str(tmp_path / "team-constraints.txt"))
    extras = readme_install_extras("Airflow, local launcher")
    pip_install(venv, f"{wheel}[{extras}]", "--constraint", constraints)

    artifacts = str(tmp_path / "artifacts")
    write_digits_partitions(os.path.join(artifacts, "raw", "digits"), DAY, 3)
    project = Project(str(tmp_path / "team"), venv, artifacts)
    for name, text in {**TEAM_FILES, "dags/tfdist_pipeline.py": readme_dag_file()}.items():
        os.makedirs(os.path.dirname(path := os.path.join(project.root, name)), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    ours = project.files()

    airflow_version = project.run("airflow", "version").split()[-1]
    assert airflow_version == (oldest_airflow() if team_airflow else pinned("apache-airflow"))  # never upgraded
    project.run("airflow", "db", "migrate")
    assert project.json("dags", "list-import-errors", "--local") == []
    assert {d["dag_id"] for d in project.json("dags", "list", "--local")} == {"team_etl", "digits_cnn"}
    (plugin,) = project.json("plugins")
    assert plugin["name"] == "tfdist" and "EntryPoint(name='tfdist'" in plugin["source"]
    providers = {p["package_name"]: p["version"] for p in project.json("providers", "list")}
    assert providers["airflow-tfdist"] == pyproject()["project"]["version"]

    run_day = (DAY + dt.timedelta(days=1)).isoformat()  # its data interval: DAY, the newest partition
    if team_airflow:  # the pipeline once, on the oldest Airflow (the pinned one runs it in every other e2e test)
        out = project.run("airflow", "dags", "test", "digits_cnn", run_day, timeout=900)
        assert re.search(r"DagRun Finished: .*state=success", out), out[-3000:]
        (published,) = published_metadata(os.path.join(artifacts, "models", "digits"))
        assert published["metrics"]["accuracy"] >= 0.9
        assert os.path.exists(os.path.join(published["path"], "saved_model.pb"))
        assert project.files() == ours  # nothing of tfdist was copied into the team's folders
        return  # the copied deployment below does not depend on the Airflow release: once, with the tested set
    assert "state=success" in project.run("airflow", "dags", "test", "team_etl", run_day)  # the team's own DAG
    assert project.files() == ours

    # the deployment that copies files: the wheel's tfdist/ and the thin plugin file in the plugins folder
    project.run("pip", "uninstall", "-q", "-y", "airflow-tfdist")
    plugins = project.env["AIRFLOW__CORE__PLUGINS_FOLDER"]
    with zipfile.ZipFile(wheel) as z:
        z.extractall(plugins, [n for n in z.namelist() if n.startswith("tfdist/")])
    shutil.copy(os.path.join(REPO, "plugins", "tfdist_plugin.py"), plugins)
    with open(os.path.join(plugins, ".airflowignore"), "w") as f:
        f.write("tfdist/\n")
    (plugin,) = project.json("plugins")
    assert plugin["name"] == "tfdist" and plugin["source"].endswith("tfdist_plugin.py")
    assert project.json("dags", "list-import-errors", "--local") == []
