"""The trial workers started before the command's own imports (`launch.start_workers`): the run's
executor takes that very source, one made for other work goes unused and is closed at exit, and
`bisector run` starts its zygote before it imports the search."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from bisector.model import TrialStatus
from bisector.runner import launch
from bisector.runner.executor import TrialJob
from tests.gitfixtures import squash_history
from tests.test_executor import build, config, src  # noqa: F401 - src is a fixture


def test_the_executor_takes_the_workers_started_for_its_config_and_work_dir(tmp_path: Path, src: Path) -> None:  # noqa: F811
    cfg = config(tmp_path)
    launch.start_workers(cfg, tmp_path / "work")
    launch.start_workers(cfg, tmp_path / "work")  # asked twice: one source
    (early,) = launch._EARLY.values()
    other_work = tmp_path / "elsewhere"
    launch.start_workers(cfg, other_work)  # never asked for by an executor
    unused = launch._EARLY[launch.source_args(cfg, other_work)]
    with launch.make_executor(cfg, tmp_path / "work") as executor:
        assert executor.source is early and launch.source_args(cfg, tmp_path / "work") not in launch._EARLY
        (outcome,) = executor.run([TrialJob(build(src), cfg.shapes, seed=0)])
    assert outcome.records[0].status is TrialStatus.OK
    launch._close_early()  # what exit does with the one no executor took
    assert launch._EARLY == {} and unused.proc.wait(timeout=60) is not None


PROBE = textwrap.dedent("""
    import sys, time
    import bisector.runner.workers as workers
    from bisector import cli

    launch = workers.ForkSource._launch

    def noted(self):
        print("zygote launched; search imported:", "bisector.search" in sys.modules, file=sys.stderr, flush=True)
        return launch(self)

    workers.ForkSource._launch = noted
    sys.argv = ["bisector", *sys.argv[1:]]
    cli.main()
""")


def test_bisector_run_starts_its_zygote_before_it_imports_the_search(tmp_path: Path) -> None:
    from tests.test_bad_input import CONFIG, env, write_config

    repo = tmp_path / "upstream"
    shas = squash_history(repo, n=2)
    cfg = write_config(tmp_path, repo, CONFIG)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PROBE,
            "run",
            "--config",
            str(cfg),
            "--good",
            shas[0],
            "--bad",
            shas[-1],
            "--store",
            "s.sqlite",
            "--work-dir",
            "work",
            "--report-dir",
            "report",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=env(tmp_path),
    )
    try:
        assert proc.stderr is not None
        first = next((line for line in proc.stderr if line.startswith("zygote launched")), "")
    finally:
        proc.kill()
        proc.wait()
    assert first.strip() == "zygote launched; search imported: False", first
