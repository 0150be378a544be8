"""Fault injection into training through the local launcher: a worker (with parameter servers: a ps task) killed
at a random moment, then the task's retry; a parameter-server worker killed and restarted in place while training
goes on; elastic TF clusters that continue with the workers they have left. Each trial records its figures
(``make faults`` runs several and tabulates them)."""

from __future__ import annotations

import operator
import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from tests.support.faults import FAULT_TRIALS, RandomKill, fault_modes
from tests.support.logs import collecting_logger
from tests.support.plans import prepared_plan, run, steps_of
from tests.support.processes import assert_no_process_of, wait_for
from tests.support.roots import REPO
from tfdist.contract.progress import last_beats
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers import StageFailed
from tfdist.operators.launchers.local import LocalLauncher

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.extended]

MODES = {
    "mirrored": ({"epochs": 40}, "worker-1"),
    "parameter_server": ({"strategy": "parameter_server", "num_ps": 1, "epochs": 100}, "worker-1"),
    "horovod": ({"backend": "mpi", "epochs": 120}, "rank-1"),
}
"""Training section (8-15 s of training on 2 cores: long enough to be killed in, and with parameter servers for a
killed worker to serve again) and the worker to kill or stop (a TF cluster member, or a Horovod rank)."""
EVERY = 20  # checkpoint_every_steps
DIGEST = re.compile(r"^\[([a-z]+-\d+)\] [a-z]+-\d+: done at step \d+; weights sha256 (\w+);")


@pytest.mark.parametrize("mode", fault_modes(MODES, "horovod"))
@pytest.mark.parametrize("trial", range(FAULT_TRIALS))
def test_a_process_killed_at_random_fails_the_stage_fast_and_the_retry_resumes_to_a_blessed_model(
    digits_root, fault_figures, mode, trial
):
    """Without elastic training, a killed worker (with parameter servers a ps task, whose variables are lost with
    it) fails the stage, naming it: the others are stopped at once and the task's retry resumes from the last
    checkpoint, redoing at most checkpoint_every_steps; every replica ends with the same weights and the model is
    blessed."""
    training, victim = MODES[mode]
    victim = "ps-0" if mode == "parameter_server" else victim  # its workers are restarted in place (test below)
    plan = prepared_plan(digits_root, f"killed_{mode}_{trial}", training={**training, "checkpoint_every_steps": EVERY})
    logger, _ = collecting_logger(f"killed_{mode}")
    launcher = LocalLauncher(plan)
    killer = RandomKill(plan, launcher, victim, seed=trial, after=EVERY, before=steps_of(plan, training["epochs"]) // 2)
    killer.start()
    with pytest.raises(StageFailed) as failure:
        launcher.run(plan.stage("train"), logger)
    raised_at = time.time()
    killer.join()
    stopped_after = raised_at - killer.at
    if mode == "horovod":  # mpirun ends every rank, and says which one was killed
        assert re.search(r"process rank 1 with PID \d+ on node \S+ exited on signal 9", str(failure.value))
    elif mode == "parameter_server":
        assert re.fullmatch(
            rf"{victim} was killed by signal 9; the variables it held are lost: training resumes from the latest "
            r"checkpoint \(step \d+\), on the task's retry or an elastic restart",
            failure.value.summary,
        ), failure.value.summary
    else:
        assert failure.value.summary == f"{victim} was killed by signal 9", failure.value.summary
    assert_no_process_of(plan)

    _, lines = run(plan, "train")  # the task's retry
    result = read_json(plan.layout.result("train"))
    steps_redone = killer.step - result["resumed_from_step"]
    assert killer.step < result["final_step"] == steps_of(plan, training["epochs"]), "killed after the end"
    assert 0 <= steps_redone <= EVERY, (killer.step, result)
    digests = dict(m.groups() for m in map(DIGEST.match, lines) if m)
    assert len(digests) == (1 if mode == "parameter_server" else 2) and len(set(digests.values())) == 1, digests
    run(plan, "evaluate")
    blessing = read_json(plan.layout.blessing_file)
    assert blessing["blessed"], blessing
    fault_figures(
        f"1 {'ps task' if mode == 'parameter_server' else 'worker'} killed, then the retry",
        mode,
        killed_at_step=killer.step,
        seconds_to_stop_the_rest=round(stopped_after, 2),
        steps_redone=steps_redone,
        replicas_identical=len(set(digests.values())) == 1,
        blessed=blessing["blessed"],
        accuracy=round(result["metrics"]["accuracy"], 4),
    )


@pytest.mark.parametrize("trial", range(FAULT_TRIALS))
def test_a_parameter_server_worker_killed_at_random_is_restarted_in_place_and_training_goes_on(
    digits_root, fault_figures, trial
):
    """A parameter-server worker SIGKILLed at a random step: the launcher starts it again in place while the chief's
    coordinator runs its lost closure on the other worker; once the worker serves again the coordinator recreates
    its dataset and gives it closures. Training ends at the planned step within the same run, every step counted
    once (one checkpoint per checkpoint_every_steps), and the model is blessed."""
    training, victim = MODES["parameter_server"]
    plan = prepared_plan(
        digits_root, f"ps_worker_killed_{trial}", training={**training, "checkpoint_every_steps": EVERY}
    )
    total = steps_of(plan, training["epochs"])
    launcher = LocalLauncher(plan)
    seen: dict = {"saves": [], "serving": []}
    cpu_seconds = lambda: sum(psutil.Process(launcher.processes[victim].pid).cpu_times()[:2])  # noqa: E731

    def watch(line: str) -> None:
        """When the chief saves and the victim serves; the victim's CPU seconds since it served again, as the
        chief ends (before the launcher stops the servers)."""
        if saved := re.match(r"\[chief-0\] chief-0: saved checkpoint .*/ckpt-(\d+)$", line):
            seen["saves"].append((int(saved.group(1)), time.time()))
        elif line.startswith(f"[{victim}] {victim}: serving at"):
            seen["serving"].append((time.time(), cpu_seconds()))
        elif line.startswith("[chief-0] chief-0: done at step") and len(seen["serving"]) == 2:
            seen["worked"] = cpu_seconds() - seen["serving"][1][1]

    logger, lines = collecting_logger("ps_worker_killed", watch)
    killer = RandomKill(plan, launcher, victim, seed=trial, after=EVERY, before=4 * EVERY)
    killer.start()
    result = launcher.run(plan.stage("train"), logger)
    killer.join()

    (restart,) = result["elastic_restarts"]
    assert restart["lost"] == [victim] and restart["in_place"], restart
    assert any(
        f"{victim} was killed by signal 9; restarting it in place (restart 1 of 3" in line for line in lines.lines
    )
    assert (result["resumed_from_step"], result["final_step"]) == (0, total), result
    assert [step for step, _ in seen["saves"]] == list(range(EVERY, total + 1, EVERY))
    assert seen.get("worked", 0) > 0.5, f"{victim} trained no closure once killed: {seen['serving']}"
    run(plan, "evaluate")
    blessing = read_json(plan.layout.blessing_file)
    assert blessing["blessed"], blessing
    assert_no_process_of(plan)
    saves_after_kill = [when for _, when in seen["saves"] if when > killer.at]
    fault_figures(
        "1 ps-cluster worker killed, restarted in place",
        "parameter_server",
        killed_at_step=killer.step,
        seconds_until_serving_again=round(seen["serving"][1][0] - killer.at, 2),
        longest_pause_between_checkpoints_after=round(
            max(map(operator.sub, saves_after_kill[1:], saves_after_kill)), 2
        ),
        cpu_seconds_of_the_restarted_worker=round(seen["worked"], 2),
        train_seconds=result["train_seconds"],
        steps=result["final_step"],
        blessed=blessing["blessed"],
        accuracy=round(result["metrics"]["accuracy"], 4),
    )


@pytest.mark.parametrize("trial", range(FAULT_TRIALS))
def test_an_elastic_tf_cluster_continues_with_the_workers_it_has_left(digits_root, fault_figures, trial):
    """A worker SIGKILLed at a random moment: within the same run of the stage, the launcher restarts the
    cluster with the other worker from the latest checkpoint, keeping the global batch, and training ends
    (MultiWorkerMirrored: a parameter-server worker is restarted in place instead, test above)."""
    mode = "mirrored"
    training, victim = MODES[mode]
    plan = prepared_plan(
        digits_root, f"elastic_{mode}_{trial}", training={**training, "min_workers": 1, "checkpoint_every_steps": EVERY}
    )
    logger, lines = collecting_logger(f"elastic_{mode}")
    launcher = LocalLauncher(plan)
    killer = RandomKill(plan, launcher, victim, seed=trial, after=EVERY, before=steps_of(plan, training["epochs"]) // 2)
    killer.start()
    result = launcher.run(plan.stage("train"), logger)

    (change,) = result["elastic_restarts"]
    assert change["lost"] == [victim] and (change["workers_before"], change["workers_after"]) == (2, 1), change
    steps_lost = killer.step - change["resumed_at_step"]
    assert 0 <= steps_lost <= EVERY, (killer.step, change)
    assert result["final_step"] == steps_of(plan, training["epochs"]) and result["workers"] == 1
    assert result["metrics"]["accuracy"] > 0.9  # the spec's threshold
    assert any("restarting the cluster with 1 of 2 workers from the checkpoint at step" in line for line in lines.lines)
    assert any("training again at step" in line for line in lines.lines)
    assert_no_process_of(plan)
    fault_figures(
        "elastic: a worker killed",
        mode,
        killed_at_step=killer.step,
        seconds_until_cluster_stopped=round(change["stopped_at"] - killer.at, 2),
        seconds_to_train_again=round(change["stopped_at"] + change["seconds_to_recover"] - killer.at, 2),
        steps_lost=steps_lost,
        accuracy=round(result["metrics"]["accuracy"], 4),
    )


@pytest.mark.parametrize("mode", fault_modes(MODES, "mirrored"))
@pytest.mark.parametrize("trial", range(FAULT_TRIALS))
def test_a_stopped_worker_fails_the_stage_within_the_hang_timeout_naming_it(digits_root, fault_figures, mode, trial):
    """SIGSTOP leaves a worker alive and silent while the others wait for it: the stage fails once no training
    process has stepped for hang_timeout_seconds (or, with MultiWorkerMirrored, once TF's coordination service
    makes a peer give up on it, whichever comes first), naming the stopped one, and leaves no process (a
    stopped process takes SIGKILL)."""
    training, victim = MODES[mode]
    plan = prepared_plan(
        digits_root, f"hung_{mode}_{trial}", training={**training, "epochs": 400, "hang_timeout_seconds": 10}
    )
    stopped = {}

    def stop_it(line: str) -> None:
        beats = last_beats(plan.layout.heartbeat_dir)
        if not stopped and beats and max(b.step for b in beats.values()) >= 30:
            pid = beats[victim].pid if victim in beats else launcher.processes[victim].pid
            stopped["at"] = time.time()
            os.kill(pid, signal.SIGSTOP)

    logger, _ = collecting_logger(f"hung_{mode}", stop_it)
    launcher = LocalLauncher(plan)
    backstop = threading.Timer(90, launcher.stop)  # undetected, the hang would last forever
    backstop.start()
    with pytest.raises(StageFailed) as failure:
        launcher.run(plan.stage("train"), logger)
    backstop.cancel()
    failed_after = time.time() - stopped["at"]
    message = failure.value.summary
    assert failure.value.process == victim, message
    assert message.startswith(f"{victim} made no training progress for 10 s (training.hang_timeout_seconds)") or (
        mode == "mirrored" and message.startswith(f"{victim} was stopped (process")
    ), message
    assert "SIGSTOP" in message and failed_after < 25
    assert_no_process_of(plan)
    fault_figures(
        "2 worker hung (SIGSTOP), hang_timeout_seconds 10",
        mode,
        seconds_to_fail=round(failed_after, 2),
        named_the_stopped_worker=failure.value.process == victim,
    )


@pytest.mark.parametrize("trial", range(FAULT_TRIALS))
def test_no_training_process_outlives_a_killed_task_process(digits_root, fault_figures, trial):
    """The Airflow task process SIGKILLed (no on_kill runs): every training process it started ends too."""
    plan = prepared_plan(digits_root, f"task_killed_{trial}", training={"epochs": 400})
    script = (
        "import json, logging, sys\n"
        "from tfdist.operators.launchers.local import LocalLauncher\n"
        "from tests.support.plans import plan_for\n"
        f"plan = plan_for({digits_root!r}, {plan.context.run_id!r}, training={{'epochs': 400}})\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
        "LocalLauncher(plan).run(plan.stage('train'), logging.getLogger('task'))\n"
    )
    task = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO)
    for line in task.stdout:
        if "worker-1: step" in line:
            break
    training = [
        p for p in psutil.Process(task.pid).children(recursive=True) if "tfdist.trainer.train" in " ".join(p.cmdline())
    ]
    assert len(training) == 2
    task.kill()
    task.wait()
    killed_at = time.time()
    wait_for(
        lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in training),
        15,
        "the training processes to end after their task process was killed",
    )
    assert_no_process_of(plan)
    fault_figures(
        "3 task process killed",
        "mirrored",
        training_processes=len(training),
        left_running=0,
        seconds_until_none_left=round(time.time() - killed_at, 2),
    )


@pytest.mark.skipif(FAULT_TRIALS == 1, reason="make faults only: the yardstick of the elastic and restart runs")
@pytest.mark.parametrize("mode", ["mirrored", "parameter_server"])
def test_an_undisturbed_run_gives_the_accuracy_to_compare_with(digits_root, fault_figures, mode):
    training, _ = MODES[mode]
    plan = prepared_plan(digits_root, f"undisturbed_{mode}", training={**training, "checkpoint_every_steps": EVERY})
    run(plan, "train")
    result = read_json(plan.layout.result("train"))
    fault_figures(
        "undisturbed (the yardstick)",
        mode,
        accuracy=round(result["metrics"]["accuracy"], 4),
        train_seconds=result["train_seconds"],
    )
