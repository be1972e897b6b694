"""`guardrail bench`'s --out folder: whole for any number of scenarios, one run's files or the earlier run's (never a
mix), and no lock file left behind however the run ends (a killed run's is taken over, with a note)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from arena.bench import publish
from arena.bench import runner as bench_runner
from arena.bench.publish import STAGING_NAME
from arena.bench.report import write_report
from arena.bench.stats import summarise

# The README's example, with one seed and one worker: the calibrated agent, the sensitivity runs and detection on.
IDS = ["ia-011", "ia-006", "ia-014", "ia-017"]
RUN_FILES = {"results.jsonl", "summary.json", "report.md", "report.html"}


def _cli(*args: str) -> object:
    from guardrail.cli import _register, cli

    _register()
    return CliRunner().invoke(cli, ["bench", *args])


def _bench(out: Path, ids: list[str], *extra: str) -> object:
    return _cli("--seeds", "1", "--jobs", "1", "--scenarios", ",".join(ids), "--out", str(out), *extra)


def _files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _assert_one_whole_run(out: Path, ids: list[str]) -> None:
    """Every file of a run, nothing else, and all of them describing the same run."""
    files = _files(out)
    plots = {n for n in files if n.startswith("plots/")}
    assert set(files) - plots == RUN_FILES, sorted(files)
    rows = [json.loads(line) for line in files["results.jsonl"].decode().splitlines()]
    summary = json.loads(files["summary.json"])
    assert summary["scenarios"] == ids and sorted({r["scenario"] for r in rows}) == sorted(ids)
    assert summary["episodes"] == len(rows) and sorted(summary["per_task"]) == sorted(ids)
    md, html = files["report.md"].decode(), files["report.html"].decode()
    assert md.splitlines()[2].startswith(f"{len(rows)} episodes,") and f"<p>{len(rows)} episodes," in html
    drawn = set(re.findall(r"\(plots/(\w+)\.svg\)", md))
    assert {f"plots/{n}.svg" for n in drawn} == plots  # each plot the report shows, and no other run's
    assert "sensitivity" in drawn and html.count("<svg") >= len(drawn)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_the_readme_bench_of_a_few_scenarios_writes_one_whole_run(tmp_path: Path, n: int):
    # Fewer than 5 scenarios has no confidence intervals: the sensitivity plot crashed on them, after the results
    # and the summary had been replaced but not the reports.
    res = _bench(tmp_path / "b", IDS[:n])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    _assert_one_whole_run(tmp_path / "b", IDS[:n])


@pytest.fixture(scope="module")
def episode_rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("one")
    assert _bench(out, IDS[:1]).exit_code == 0
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("tasks", [1, 2, 4, 5, 20])
def test_the_report_draws_every_plot_for_any_number_of_tasks(episode_rows: list[dict], tmp_path: Path, tasks: int):
    # One real scenario's rows copied under `tasks` names, every other task failing its guarded episodes: below
    # MIN_CI_TASKS the intervals are None, from 5 on they are numbers; both must draw.
    rows = []
    for i in range(tasks):
        for r in episode_rows:
            rows.append({**r, "scenario": f"t{i:02}", "key": f"t{i}{r['key']}",
                         "passed": r["passed"] and (i % 2 == 0 or r["arm"] == "unguarded")})
    s = summarise(rows, agents=["calibrated"], arms=["guarded", "unguarded"], responsiveness=[0.0, 0.5, 0.8, 1.0],
                  wall_s=1.0, agent_defaults={"calibrated": {"responsiveness": 0.8}})
    assert (s["sensitivity"]["0.0"]["ci95"][0] is None) == (tasks < 5)
    md, _ = write_report(s, tmp_path)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "failure_modes_by_arm.svg", "pass_rate_per_task.svg", "sensitivity.svg", "time_to_accept.svg"]
    assert md.read_text().count("](plots/") == 4


def _refuse_episodes(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(spec):
        raise AssertionError(f"an episode ran again: {spec}")

    monkeypatch.setattr(bench_runner, "run_one", refuse)


def test_a_failed_report_step_leaves_the_earlier_run_as_it_was_and_resume_reports_the_new_one(tmp_path: Path,
                                                                                             monkeypatch):
    out = tmp_path / "b"
    assert _bench(out, IDS[:1]).exit_code == 0
    before = _files(out)

    def broken(_summary):
        raise RuntimeError("injected: the plot cannot be drawn")

    monkeypatch.setattr("arena.bench.plots.time_to_accept_histogram", broken)
    res = _bench(out, IDS[:2])
    assert res.exit_code != 0 and isinstance(res.exception, RuntimeError)
    assert "the earlier run's, as they were" in res.stderr and "--resume" in res.stderr
    after = _files(out)
    partial = after.pop("results.jsonl.partial")  # this run's episodes, kept
    assert after == before  # byte for byte: results, summary, reports and plots of the first run
    assert {json.loads(line)["scenario"] for line in partial.decode().splitlines()} == set(IDS[:2])
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # no staging, no lock

    monkeypatch.undo()
    _refuse_episodes(monkeypatch)
    res = _bench(out, IDS[:2], "--resume")
    assert res.exit_code == 0, res.output
    _assert_one_whole_run(out, IDS[:2])


def test_a_move_that_fails_half_way_puts_the_earlier_files_back(tmp_path: Path, monkeypatch):
    out = tmp_path / "b"
    assert _bench(out, IDS[:1]).exit_code == 0
    before = _files(out)
    real = os.replace
    moves: list[str] = []

    def third_fails(src, dest):
        moves.append(str(dest))
        if len(moves) == 3:
            raise OSError(28, "No space left on device", str(dest))
        return real(src, dest)

    monkeypatch.setattr(publish.os, "replace", third_fails)
    res = _bench(out, IDS[:2])
    assert res.exit_code == 2 and "No space left on device" in res.stderr, res.output
    after = _files(out)
    assert after.pop("results.jsonl.partial") and after == before
    assert not (out / STAGING_NAME).exists()


def test_the_lock_goes_with_the_run_whatever_its_end(tmp_path: Path, monkeypatch):
    lock = tmp_path / "b" / bench_runner.LOCK_NAME
    assert _bench(tmp_path / "b", IDS[:1]).exit_code == 0
    assert not lock.exists()
    monkeypatch.setattr("arena.bench.plots.time_to_accept_histogram", lambda s: 1 / 0)
    assert _bench(tmp_path / "b", IDS[:1]).exit_code != 0
    assert not lock.exists()
    # Ctrl-C and SIGTERM: test_bench_robustness (in process, and a real SIGTERM to a bench with two workers).


def test_a_lock_a_killed_run_left_is_taken_over_with_a_note(tmp_path: Path):
    out = tmp_path / "b"
    out.mkdir()
    code = ("import sys, time; from pathlib import Path; from arena.bench.runner import out_locked\n"
            f"with out_locked(Path({str(out)!r})):\n    print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"  # blocks until the lock is held (or the process died)
        res = _bench(out, IDS[:1])
        assert res.exit_code == 2 and f"in use by another run (pid {holder.pid})" in res.stderr
        holder.send_signal(signal.SIGKILL)  # no `finally` runs: the lock file stays, the kernel drops the flock
        holder.wait(timeout=120)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert (out / bench_runner.LOCK_NAME).read_text().strip() == str(holder.pid)
    res = _bench(out, IDS[:1])
    assert res.exit_code == 0, res.output
    assert f"taking over the lock file left by run pid {holder.pid}, which is no longer running" in res.stderr
    assert not (out / bench_runner.LOCK_NAME).exists()
    _assert_one_whole_run(out, IDS[:1])


def test_a_lock_file_removed_under_a_waiting_run_is_not_trusted(tmp_path: Path, monkeypatch):
    """The run that held the lock removes its file as it ends: a run that opened the old file just before must not
    take a lock on it while a third run locks the new file at the path."""
    import fcntl

    out = tmp_path / "b"
    out.mkdir()
    path = out / bench_runner.LOCK_NAME
    path.write_text("")
    real_flock = fcntl.flock
    swapped: list[int] = []

    def flock_after_a_swap(f, op):
        if not swapped:  # between our open and our flock: the file is removed and another run makes a new one
            swapped.append(1)
            path.unlink()
            path.write_text("")
        return real_flock(f, op)

    monkeypatch.setattr(fcntl, "flock", flock_after_a_swap)
    with bench_runner.out_locked(out):
        assert path.read_text() == f"{os.getpid()}\n"  # the lock is on the file at the path
        monkeypatch.setattr(fcntl, "flock", real_flock)
        with pytest.raises(bench_runner.InputError, match="in use by another run"):
            with bench_runner.out_locked(out):
                pass
    assert swapped and not path.exists()
