"""`hostcapd.frontend.affinity`: a front-end's threads kept on the core it
started on ("core") or left to the scheduler ("any"). Each case runs in a
child process: the placement changes the calling thread's affinity."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from hostcapd.frontend import affinity

TWO_CPUS = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU allowed")


def test_cpu_lists() -> None:
    assert affinity._cpu_list("0") == {0}
    assert affinity._cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}


def _fake_cpu(root: Path, cpu: int, caches: dict[int, str]) -> None:
    for index, (level, shared) in enumerate(sorted(caches.items())):
        d = root / f"cpu{cpu}" / "cache" / f"index{index}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "shared_cpu_list").write_text(shared + "\n")


def test_a_core_is_the_cpus_sharing_its_level_2_cache(tmp_path: Path) -> None:
    _fake_cpu(tmp_path, 3, {1: "3", 2: "2-3", 3: "0-7"})  # SMT siblings 2 and 3
    assert affinity.core_of(3, tmp_path) == {2, 3}
    _fake_cpu(tmp_path, 5, {1: "5", 3: "0-7"})  # no level 2 said: the CPU alone
    assert affinity.core_of(5, tmp_path) == {5}
    assert affinity.core_of(9, tmp_path) == {9}  # no sysfs at all


def _placed(mode: str, out: multiprocessing.Queue[object]) -> None:
    before = os.sched_getaffinity(0)
    try:
        cpus = affinity.place(mode)
    except ValueError as error:
        out.put(("refused", str(error)))
        return
    out.put((before, cpus, os.sched_getaffinity(0)))


def _in_child(mode: str) -> object:
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue[object] = ctx.Queue()
    child = ctx.Process(target=_placed, args=(mode, out))
    child.start()
    child.join(30)
    return out.get(timeout=5)


@TWO_CPUS
def test_core_keeps_the_process_on_the_core_it_runs_on() -> None:
    before, cpus, after = _in_child("core")  # type: ignore[misc]
    assert cpus is not None and after == cpus
    assert cpus < before  # fewer CPUs than it was allowed
    assert cpus == affinity.core_of(min(cpus)) & before


def test_any_leaves_the_process_to_the_scheduler() -> None:
    before, cpus, after = _in_child("any")  # type: ignore[misc]
    assert cpus is None and after == before


def test_an_unknown_mode_is_refused() -> None:
    assert _in_child("numa") == ("refused", "unknown front-end CPU placement 'numa'")
