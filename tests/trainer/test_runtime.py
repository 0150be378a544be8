"""A stage's process start: TensorFlow and Keras import without Keras's optional scikit-learn and matplotlib
imports (both installed here, as in many teams' images), which stay importable afterwards. Its end: done, it ends
without the interpreter's teardown, yet with its exit handlers run and its output whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, sys
from tfdist.trainer.runtime import KERAS_OPTIONAL_IMPORTS, import_tensorflow
tf = import_tensorflow()
during = sorted(name for name in KERAS_OPTIONAL_IMPORTS if name in sys.modules)
import sklearn.base, matplotlib
shape = tf.keras.layers.Dense(2)(tf.ones([1, 3])).shape.as_list()
print(json.dumps({"during": during, "after": [sklearn.base.__name__, matplotlib.__name__], "keras": shape}))
"""


@pytest.mark.e2e  # 10-30 s: in make test, not in the fast set
def test_keras_optional_imports_are_skipped_and_importable_afterwards():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == {"during": [], "after": ["sklearn.base", "matplotlib"], "keras": [1, 2]}


ENDING = """
import atexit, sys
from tfdist.trainer.runtime import run_stage
atexit.register(lambda: print("exit handler ran"))
def main():
    sys.stdout.write("done, unflushed")
    if sys.argv[1] == "fails":
        raise ValueError("the stage failed")
run_stage(main)
"""


@pytest.mark.parametrize("outcome", ["done", "fails"])
def test_a_stage_process_ends_with_its_exit_handlers_and_its_output_whole(outcome):
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # output a pipe holds back
    ended = subprocess.run(
        [sys.executable, "-c", ENDING, outcome], capture_output=True, text=True, timeout=60, env=buffered
    )
    assert ended.stdout == "done, unflushedexit handler ran\n"
    assert (ended.returncode, "ValueError: the stage failed" in ended.stderr) == (
        (0, False) if outcome == "done" else (1, True)
    )
