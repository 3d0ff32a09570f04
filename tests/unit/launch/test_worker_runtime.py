"""``serve --workers N``: each worker's framework pools get its share of the CPUs unless the threads were set."""

from __future__ import annotations

import os

from servekit._utils.processes import cpu_share, usable_cpus
from servekit.config.models import RuntimeOptions
from servekit.launch.serve import worker_runtime
from servekit.services.transform.engine import RunOptions, intra_op_threads


def test_each_worker_gets_its_share_of_the_cpus_and_at_least_one() -> None:
    assert worker_runtime(RuntimeOptions(), 2, cpus=8).intra_op_threads == 4
    assert worker_runtime(RuntimeOptions(), 3, cpus=8).intra_op_threads == 2
    assert worker_runtime(RuntimeOptions(), 4, cpus=2).intra_op_threads == 1


def test_threads_the_user_set_and_a_single_worker_are_left_alone() -> None:
    assert worker_runtime(RuntimeOptions(intra_op_threads=3), 2, cpus=8).intra_op_threads == 3
    assert worker_runtime(RuntimeOptions(), 1, cpus=8).intra_op_threads == 0  # the runtime's own default


def test_the_cpus_are_this_process_s_own() -> None:
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert usable_cpus() == expected
    assert worker_runtime(RuntimeOptions(), 1_000_000).intra_op_threads == 1


def test_batch_transform_instances_share_the_cpus_by_the_same_rule() -> None:
    assert intra_op_threads(RunOptions(), 2) == cpu_share(2) == max(1, usable_cpus() // 2)
    assert intra_op_threads(RunOptions(intra_op_threads=5), 2) == 5
