"""Every process of a run starts from the same parent: the first to look the baseline up records its choice, the
others (and a retry starting before any checkpoint) take it, whatever they found themselves."""

from __future__ import annotations

import os

from tests.publishing.test_withdraw import publish
from tfdist.publishing import registry
from tfdist.trainer.warm_start import CHOICE, agreed_parent


def test_the_first_process_to_choose_decides_for_the_others_and_a_choice_no_longer_published_starts_cold(tmp_path):
    model_dir, choice = str(tmp_path / "models" / "m"), str(tmp_path / "run" / "train" / CHOICE)
    for version in (1, 2):
        publish(model_dir, version)
    first, second = registry.versions(model_dir)
    assert agreed_parent(first, model_dir, choice) == (first, None)
    later, _ = agreed_parent(second, model_dir, choice)  # 2 came after
    assert later.version == 1 and later.path == first.path
    assert os.listdir(os.path.dirname(choice)) == [CHOICE]  # no scratch file left
    os.rename(os.path.join(model_dir, "1"), str(tmp_path / "gone"))
    assert agreed_parent(second, model_dir, choice) == (
        None,
        "baseline version 1, chosen by this run's first process, is published no more",
    )
