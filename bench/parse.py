"""DAG-file parse time, ours and the baseline's code side by side in the same run (issue 35: "measured against
today's code in the same run").

Each parse runs in a fresh process set up as the dag-processor's forked child: Airflow (and, with plugins
loaded, the tfdist plugin) imported, then the Airflow modules the file names; the objects so far frozen out of
the garbage collector's way, as the dag-processor does before it forks (``gc.freeze``). Measured: the parse
alone, wall-clock and the process's CPU time.

The files: an empty DAG of the example's shape (the yardstick), the example DAG file, the YAML-folder DAG file
of ``dags/``, and a folder of ``FOLDER_SPECS`` YAML specs (copies of ``dags/specs``' examples, each renamed;
``FOLDER_INVALID`` of them invalid, as a real folder may hold).

The baseline is a commit of this repository (``BASELINE``, or ``--parse-baseline``): ``git archive`` of it into
the work directory, its packages laid out as ``tfdist.*`` (its ``[tool.setuptools.package-dir]``) on
``PYTHONPATH``, ahead of the installed tfdist, so its processes import its code (the plugin included) and parse
its own DAG files; the same Python environment. Without git or that commit (a shallow clone), the baseline is
left out and the results say why."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tomllib

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINE = "f879a36"
""""Today's code" of issue 35's goals: main as it landed before issue 35 (6440a3d) with only the folders moved
(the same code at the new import paths, so the installed entry points find its plugin)."""
FOLDER_SPECS = 303
FOLDER_INVALID = 3

PROBE = """
import gc, importlib, json, runpy, sys, time
import airflow.sdk
from airflow.utils.file import iter_airflow_imports
for module in iter_airflow_imports(sys.argv[1]):  # what the dag-processor imports before it forks a parse
    importlib.import_module(module)
gc.freeze()  # as the dag-processor's manager does before it forks
wall, cpu = time.perf_counter(), time.process_time()
runpy.run_path(sys.argv[1])
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
tensorflow = sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow")[:3]
print(json.dumps({"seconds": wall, "cpu_seconds": cpu, "tensorflow": tensorflow}))
"""
FOLDER_DAG = """from tfdist.operators import build_dags_from_directory

globals().update(build_dags_from_directory({folder!r}))
"""
PLUGIN_LOADING = {"plugins loaded": "False", "lazy plugins": "True"}
"""[core] lazy_load_plugins: False (recommended) has every Airflow process load the tfdist plugin, which imports
the DAG builder, before the dag-processor forks; True is Airflow's default."""
WARM_UP_SETTING = "plugins loaded"
"""The setting of the warm-up parses, which only write the bytecode caches: with plugins loaded a process imports
every module the other setting's does."""
GOALS = {"plugins loaded": 1.2, "lazy plugins": 3.0}
"""Each DAG file's parse against the empty DAG's, at most (issue 35)."""
FOLDER_GOAL = 0.5
"""The spec folder's parse, ours against the baseline's, at most (issue 35)."""


def write_folder(tree: str, folder: str) -> None:
    """``FOLDER_SPECS`` specs from ``tree``'s example YAML specs, each with its own name and model name; the last
    ``FOLDER_INVALID``: an unknown key, YAML that does not read, a name already taken."""
    examples = [
        yaml.safe_load(open(os.path.join(tree, "dags", "specs", f)))
        for f in sorted(os.listdir(os.path.join(tree, "dags", "specs")))
        if f.endswith((".yaml", ".yml"))
    ]
    os.makedirs(folder)
    for i in range(FOLDER_SPECS):
        spec = dict(examples[i % len(examples)], name=f"pipeline_{i:03d}")
        spec["export"] = dict(spec["export"], model_name=f"model_{i:03d}")
        text = yaml.safe_dump(spec, sort_keys=False)
        bad = i - (FOLDER_SPECS - FOLDER_INVALID)
        if bad == 0:
            text += "trainng: {epochs: 1}\n"
        elif bad == 1:
            text += "data: [unclosed\n"
        elif bad == 2:
            text = text.replace(f"name: pipeline_{i:03d}", "name: pipeline_000", 1)
        with open(os.path.join(folder, f"pipeline_{i:03d}.yaml"), "w") as f:
            f.write(text)


def baseline_tree(work: str, commit: str) -> tuple[str, str] | str:
    """(the baseline's source tree, the PYTHONPATH entry that makes it ``tfdist``), or why there is none."""
    tree, path = os.path.join(work, "baseline"), os.path.join(work, "baseline-path")
    os.makedirs(tree)
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=REPO, capture_output=True)
    if archive.returncode:
        return f"git archive {commit}: {archive.stderr.decode().strip() or archive.returncode}"
    subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
    with open(os.path.join(tree, "pyproject.toml"), "rb") as f:
        package_dirs = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    for package, folder in package_dirs.items():
        target = os.path.join(path, *package.split("."))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(os.path.join(tree, folder), target)
    return tree, path


def measure(work: str, repetitions: int, baseline: str | None = BASELINE) -> dict:
    """Per code ('ours', 'baseline'), plugin setting and DAG file: the samples of its parse."""
    codes = {"ours": (REPO, None)}
    missing = None
    if baseline:
        found = baseline_tree(work, baseline)
        if isinstance(found, str):
            missing = found
            print(f"  no baseline: {found}", flush=True)
        else:
            codes["baseline"] = found
    files = {}
    for code, (tree, _) in codes.items():
        folder = os.path.join(work, f"spec-folder-{code}")
        write_folder(tree, folder)
        folder_dag = os.path.join(work, f"spec_folder_{code}.py")
        with open(folder_dag, "w") as f:
            f.write(FOLDER_DAG.format(folder=folder))
        files[code] = {
            "empty": os.path.join(REPO, "bench", "empty_dag.py"),
            "digits_nightly": os.path.join(tree, "dags", "digits_nightly.py"),
            "yaml_specs": os.path.join(tree, "dags", "yaml_specs.py"),
            "spec_folder": folder_dag,
        }
    env = {
        **os.environ,
        "AIRFLOW_HOME": os.path.join(work, "airflow_home"),
        "TFDIST_ARTIFACT_ROOT": work,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",  # as make sets it (with examples, Airflow's parent imports more)
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a deployment parses with bytecode caches
    cases = [(code, setting, name) for code in codes for setting in PLUGIN_LOADING for name in files[code]]
    samples: dict = {code: {s: {name: [] for name in files[code]} for s in PLUGIN_LOADING} for code in codes}
    warm_up = [case for case in cases if case[1] == WARM_UP_SETTING]
    for repetition in range(repetitions + 1):  # the first writes the bytecode caches
        order = warm_up if repetition == 0 else cases if repetition % 2 == 0 else cases[::-1]
        for code, setting, name in order:
            python_path = codes[code][1]
            out = subprocess.run(
                [sys.executable, "-c", PROBE, files[code][name]],
                cwd=codes[code][0],
                check=True,
                capture_output=True,
                text=True,
                env={
                    **env,
                    "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": PLUGIN_LOADING[setting],
                    **(
                        {"PYTHONPATH": os.pathsep.join(filter(None, [python_path, env.get("PYTHONPATH")]))}
                        if python_path
                        else {}
                    ),
                },
            )
            if repetition:
                samples[code][setting][name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {"baseline": baseline, "missing": missing, "samples": samples}


def _seconds(samples: list[dict], clock: str = "seconds") -> list[float]:
    return [s[clock] for s in samples]


def rows(results: dict, ratio_row) -> list[dict]:
    out = []
    samples, label = results["samples"], f"baseline {results['baseline']}"
    for code, by_setting in samples.items():
        who = "" if code == "ours" else f" ({label})"
        for setting, p in by_setting.items():
            goal = GOALS[setting] if code == "ours" else None
            for name in ("digits_nightly", "yaml_specs"):
                out.append(
                    ratio_row(
                        f"DAG file parse, {setting}: {name} / empty DAG{who}",
                        _seconds(p[name]),
                        _seconds(p["empty"]),
                        f"≤ {goal}" if goal else "",
                        (lambda m, goal=goal: m <= goal) if goal else (lambda m: None),
                    )
                )
    if "baseline" in samples:
        for setting in PLUGIN_LOADING:
            for clock in ("seconds", "cpu_seconds"):
                out.append(
                    ratio_row(
                        f"{FOLDER_SPECS}-spec folder parse, {setting}: ours / {label}"
                        + (" (CPU time)" if clock == "cpu_seconds" else ""),
                        _seconds(samples["ours"][setting]["spec_folder"], clock),
                        _seconds(samples["baseline"][setting]["spec_folder"], clock),
                        f"≤ {FOLDER_GOAL}",
                        lambda m: m <= FOLDER_GOAL,
                    )
                )
    return out


def absolutes(results: dict) -> list[tuple[str, str]]:
    out = []
    for code, by_setting in results["samples"].items():
        who = "" if code == "ours" else f" (baseline {results['baseline']})"
        for setting, p in by_setting.items():
            for name, samples in p.items():
                wall, cpu = statistics.median(_seconds(samples)), statistics.median(_seconds(samples, "cpu_seconds"))
                per_spec = f", {1000 * wall / FOLDER_SPECS:.2f} ms per spec" if name == "spec_folder" else ""
                out.append(
                    (
                        f"DAG file parse, {setting}: {name}{who}",
                        f"{1000 * wall:.1f} ms (CPU {1000 * cpu:.1f} ms){per_spec}",
                    )
                )
    if results["missing"]:
        out.append(("DAG file parse: baseline", f"left out: {results['missing']}"))
    tensorflow = sorted(
        {
            m
            for by_setting in results["samples"].values()
            for p in by_setting.values()
            for samples in p.values()
            for s in samples
            for m in s["tensorflow"]
        }
    )
    out.append(("TensorFlow modules imported by parsing the DAG files", ", ".join(tensorflow) or "none"))
    return out
