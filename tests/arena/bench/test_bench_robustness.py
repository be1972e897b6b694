"""`guardrail bench` on bad input and interruption: bounded --jobs/--seeds, an unwritable --out, explicit empty
lists, results.jsonl.partial and atomic files, SIGINT/SIGTERM exit codes and workers that die with the parent,
torn and non-UTF-8 results lines on --resume, and the --env live warning."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import Future
from pathlib import Path

import pytest
from click.testing import CliRunner

from arena.bench import runner as bench_runner

SMALL = ["--scenarios", "ia-011", "--seeds", "1", "--no-detection", "--responsiveness", "", "--jobs", "1"]


def _cli(*args: str) -> object:
    from guardrail.cli import _register, cli

    _register()
    return CliRunner().invoke(cli, ["bench", *args])


def _one_error_line(res: object, starts: str) -> None:
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {starts}"), res.stderr
    assert "Traceback" not in res.output


def _no_episode(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(spec):
        raise AssertionError(f"an episode ran: {spec}")

    monkeypatch.setattr(bench_runner, "run_one", refuse)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().decode().splitlines()]


class _NoPool:
    def __init__(self, *a, **kw):
        raise AssertionError("a process pool was made")  # not a million forks if the bound is ever lost


def test_jobs_is_bounded_and_workers_never_outnumber_episodes(tmp_path: Path, monkeypatch):
    _no_episode(monkeypatch)
    monkeypatch.setattr(bench_runner, "ProcessPoolExecutor", _NoPool)
    for bad in ("1000000", str(bench_runner.max_jobs() + 1), "0"):
        _one_error_line(_cli(*SMALL, "--jobs", bad, "--out", str(tmp_path / "o")), "--jobs:")
    assert not (tmp_path / "o").exists()  # rejected before the output directory is made
    monkeypatch.undo()

    made: list[int] = []

    class Recording:
        """Records the pool size and runs each chunk at once, here: a real pool forked from this process would
        inherit the embedded OPA's Go runtime if an earlier test loaded it, and Go does not survive a fork."""

        def __init__(self, max_workers=None, **kw):
            made.append(max_workers)

        def submit(self, fn, *args):
            fut = Future()
            fut.set_result(fn(*args))
            return fut

        def shutdown(self, wait=True, cancel_futures=False):
            pass

    monkeypatch.setattr(bench_runner, "ProcessPoolExecutor", Recording)
    plan = bench_runner.plan_bench(["ia-011"], ["replay:reference"], ["guarded", "unguarded"], 1, [],
                                   detection=False)
    rows = bench_runner.run_plan(plan, tmp_path / "r" / "results.jsonl", jobs=8)
    assert made == [2] and len(rows) == 2


def test_seeds_beyond_the_limit_is_bad_input_before_any_plan(tmp_path: Path, monkeypatch):
    _no_episode(monkeypatch)
    _one_error_line(_cli(*SMALL[:2], "--seeds", "1000000000", "--out", str(tmp_path)), "--seeds:")


def test_an_explicit_empty_list_is_bad_input(tmp_path: Path, monkeypatch):
    _no_episode(monkeypatch)
    for opt in ("--scenarios", "--arms", "--agents"):
        args = list(SMALL)
        if opt in args:
            args[args.index(opt) + 1] = " , "
        else:
            args += [opt, ""]
        _one_error_line(_cli(*args, "--out", str(tmp_path / "o")), f"{opt}:")


def test_an_unwritable_out_is_bad_input_before_any_episode(tmp_path: Path, monkeypatch):
    _no_episode(monkeypatch)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    _one_error_line(_cli(*SMALL, "--out", str(blocker / "sub")), "--out:")
    with pytest.raises(bench_runner.InputError, match="--out"):
        bench_runner.prepare_out(blocker / "sub" / "deeper")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_out_is_bad_input(tmp_path: Path, monkeypatch):
    _no_episode(monkeypatch)
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    try:
        _one_error_line(_cli(*SMALL, "--out", str(ro)), "--out:")
    finally:
        ro.chmod(0o755)


def _interrupt_second_episode(monkeypatch: pytest.MonkeyPatch, how: str) -> list[str]:
    real = bench_runner.run_one
    ran: list[str] = []

    def run_one(spec):
        ran.append(spec.key())
        if len(ran) == 2:
            if how == "SIGTERM":
                assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None), "SIGTERM would kill pytest"
                os.kill(os.getpid(), signal.SIGTERM)  # the bench's handler turns it into Terminated here
                time.sleep(5)  # not reached
            raise KeyboardInterrupt
        return real(spec)

    monkeypatch.setattr(bench_runner, "run_one", run_one)
    return ran


@pytest.mark.parametrize("how,code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupted_run_keeps_the_previous_results_and_resumes_from_the_partial(tmp_path: Path, monkeypatch,
                                                                                     how, code):
    out = tmp_path / "b"
    first = _cli(*SMALL, "--out", str(out))
    assert first.exit_code == 0, first.output
    before = {n: (out / n).read_bytes() for n in ("results.jsonl", "summary.json", "report.md", "report.html")}

    _interrupt_second_episode(monkeypatch, how)
    res = _cli(*SMALL, "--out", str(out))
    assert res.exit_code == code, res.output
    partial = out / "results.jsonl.partial"
    msg = [line for line in res.stderr.strip().splitlines() if not line.startswith("bench ")]  # the progress bar's
    assert len(msg) == 1 and "1 of 2 episodes kept" in msg[0] and str(partial) in msg[0] and "--resume" in msg[0]
    # The earlier run's files are untouched; the new run's one finished episode is in the partial file.
    assert {n: (out / n).read_bytes() for n in before} == before
    assert len(_lines(partial)) == 1
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]

    # An interrupted run in an empty directory, then --resume: only the missing episode runs.
    fresh = tmp_path / "fresh"
    monkeypatch.undo()
    _interrupt_second_episode(monkeypatch, how)
    assert _cli(*SMALL, "--out", str(fresh)).exit_code == code
    assert sorted(p.name for p in fresh.iterdir()) == ["results.jsonl.partial"]  # the lock goes with the run
    done = _lines(fresh / "results.jsonl.partial")
    monkeypatch.undo()
    ran = _interrupt_second_episode(monkeypatch, "none-needed")
    res = _cli(*SMALL, "--out", str(fresh), "--resume")
    assert res.exit_code == 0, res.output
    assert len(ran) == 1 and ran[0] != done[0]["key"]
    assert not (fresh / "results.jsonl.partial").exists()
    assert len({r["key"] for r in _lines(fresh / "results.jsonl")}) == 2
    assert json.loads((fresh / "summary.json").read_text())["episodes"] == 2


def test_resume_after_an_interrupted_fresh_run_reruns_what_it_had_not_redone(tmp_path: Path, monkeypatch):
    # A finished run, then a fresh run interrupted after one episode: --resume must run the other episode again,
    # not take it from the finished run the fresh one was replacing.
    out = tmp_path / "b"
    assert _cli(*SMALL, "--out", str(out)).exit_code == 0
    _interrupt_second_episode(monkeypatch, "SIGINT")
    assert _cli(*SMALL, "--out", str(out)).exit_code == 130
    kept = _lines(out / "results.jsonl.partial")
    monkeypatch.undo()
    ran = _interrupt_second_episode(monkeypatch, "none-needed")
    assert _cli(*SMALL, "--out", str(out), "--resume").exit_code == 0
    assert len(ran) == 1 and ran[0] != kept[0]["key"]


def test_a_row_whose_key_is_not_a_string_is_skipped_with_a_warning(tmp_path: Path):
    results = tmp_path / "results.jsonl"
    results.write_text('{"key": ["x"]}\n{"key": 7}\n')
    rows = bench_runner.read_results(results)
    assert list(rows) == [] and [n for n, _ in rows.bad] == [1, 2]


def _row(**kw) -> str:
    row = {"key": json.dumps(["ia-011", "calibrated", "guarded", 0, {}], sort_keys=True), "scenario": "ia-011",
           "agent": "calibrated", "arm": "guarded", "seed": 0, "passed": True}
    row.update(kw)
    return json.dumps(row)


def test_rows_that_would_break_the_report_or_serve_another_episode_are_skipped_with_the_reason(tmp_path: Path):
    """`"passed": "no"` crashed the report with a traceback, `"passed": NaN` printed nan% and wrote NaN into
    summary.json, a row whose scenario disagreed with its key was reused for the key's episode, a second row for a
    key was taken silently."""
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join([_row(), _row(passed="no"), _row(passed=float("nan")), _row(scenario="ia-012"),
                                  _row(passed=None), _row()]) + "\n")
    rows = bench_runner.read_results(results)
    assert len(list(rows)) == 1
    why = dict(rows.bad)
    assert sorted(why) == [2, 3, 4, 5, 6]
    assert "passed is 'no'" in why[2] and "passed is nan" in why[3]
    assert "scenario 'ia-012' disagrees with its key" in why[4]
    assert "a second row for the key of line 1" in why[6]


def test_workers_check_their_parent_only_when_forked(monkeypatch):
    # Under forkserver (3.14's Linux default) a worker's parent is the fork server: checking it against the
    # bench's pid would make every worker exit at once.
    monkeypatch.setattr(os, "getppid", lambda: 1)
    exits: list[int] = []
    monkeypatch.setattr(os, "_exit", lambda code: exits.append(code))
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # leave pytest's handlers alone
    monkeypatch.setattr(sys, "platform", "not-linux")  # and no PR_SET_PDEATHSIG on pytest itself
    bench_runner._worker_init(os.getpid() + 1, forked=False)
    assert exits == []
    bench_runner._worker_init(os.getpid() + 1, forked=True)
    assert exits == [1]


def test_resume_drops_a_torn_tail_and_skips_a_non_utf8_line(tmp_path: Path):
    plan = bench_runner.plan_bench(["ia-011"], ["replay:reference"], ["guarded", "unguarded"], 1, [],
                                   detection=False)
    results = tmp_path / "results.jsonl"
    bench_runner.run_plan(plan, results)
    good = results.read_bytes().splitlines(keepends=True)
    assert len(good) == 2
    # One whole line, a line that is not UTF-8, and the second episode's line cut off mid-write.
    results.write_bytes(good[0] + b"\xff\xfe{not utf-8}\n" + good[1][:40])
    warnings: list[str] = []
    rows = bench_runner.run_plan(plan, results, resume=True, on_warning=warnings.append)
    assert len(rows) == 2
    assert any(f"{results}:2: not UTF-8" in w for w in warnings), warnings
    assert any(f"{results}:3: a torn last line" in w for w in warnings), warnings
    # Every line of the new file parses: the first new row was not glued onto the torn one.
    assert sorted(r["key"] for r in _lines(results)) == sorted(s.key() for s in plan.episodes)
    assert results.read_bytes().endswith(b"\n")


def test_resume_through_the_cli_warns_on_a_corrupt_line(tmp_path: Path):
    out = tmp_path / "b"
    assert _cli(*SMALL, "--out", str(out)).exit_code == 0
    lines = (out / "results.jsonl").read_bytes().splitlines(keepends=True)
    (out / "results.jsonl").write_bytes(lines[0] + b"\x80\x81\n")
    res = _cli(*SMALL, "--out", str(out), "--resume")
    assert res.exit_code == 0, res.output
    assert f"{out / 'results.jsonl'}:2: not UTF-8" in res.stderr
    assert len(_lines(out / "results.jsonl")) == 2


def test_env_live_warns_about_the_options_it_ignores(monkeypatch):
    import arena.live.stack as stack

    monkeypatch.setattr(stack, "install_cleanup", lambda: None)  # no process-wide signal handlers in pytest
    # ia-011 has no live wiring, so the run stops there (exit 2) after the warning, before any stack starts.
    res = _cli("--env", "live", "--scenarios", "ia-011", "--seeds", "3", "--no-detection", "--resume")
    assert res.exit_code == 2
    assert res.stderr.splitlines()[0] == "warning: --env live ignores --seeds, --resume, --no-detection"
    res = _cli("--env", "live", "--scenarios", "ia-011")
    assert res.exit_code == 2 and "warning" not in res.stderr


def _children(pid: int) -> list[int]:
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(d))
    return kids


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_sigterm_with_two_jobs_leaves_no_worker_and_only_whole_lines(tmp_path: Path):
    out = tmp_path / "b"
    code = ("from guardrail.cli import main; main(['bench', '--scenarios', 'ia-011', '--seeds', '400', "
            f"'--no-detection', '--responsiveness', '', '--jobs', '2', '--json', '--out', {str(out)!r}])")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    partial = out / "results.jsonl.partial"
    workers: list[int] = []
    try:
        # Bounds generous enough for a machine at load 15: each wait ends as soon as its event happens.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            workers = _children(proc.pid)
            if len(workers) == 2 and partial.exists() and partial.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None and len(workers) == 2, "the bench did not get going"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for w in workers:  # should there be any left, do not leave them running
            if _alive(w):
                os.kill(w, signal.SIGKILL)
    assert proc.returncode == 143, err
    kept = int(err.strip().splitlines()[-1].split("interrupted: ", 1)[1].split()[0])
    # A worker the bench did not stop itself gets SIGKILL as its parent dies (PR_SET_PDEATHSIG), which a busy
    # machine may deliver a moment after the parent's exit: wait for it, bounded, rather than a fixed pause.
    deadline = time.monotonic() + 60
    while [w for w in workers if _alive(w)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [w for w in workers if _alive(w)]
    assert sorted(p.name for p in out.iterdir()) == ["results.jsonl.partial"]  # the lock goes with the run
    data = partial.read_bytes()
    assert data.endswith(b"\n")
    rows = _lines(partial)
    assert len(rows) == kept >= 2 and all("key" in r for r in rows)


def test_resume_runs_again_the_rows_another_build_made(tmp_path: Path, monkeypatch):
    """A row stamped by another build (or by none, from before the stamp) is not carried: its episode runs again."""
    plan = bench_runner.plan_bench(["ia-011"], ["replay:reference"], ["guarded", "unguarded"], 1, [],
                                   detection=False)
    results = tmp_path / "results.jsonl"
    first = bench_runner.run_plan(plan, results)
    from arena.bench.build import build_id

    assert {r["build"] for r in _lines(results)} == {build_id()}
    rows = _lines(results)
    rows[0]["build"] = "0123456789abcdef"  # made by an older checkout
    del rows[1]["build"]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ran: list[str] = []
    real = bench_runner.run_one
    monkeypatch.setattr(bench_runner, "run_one", lambda spec: ran.append(spec.key()) or real(spec))
    warnings: list[str] = []
    again = bench_runner.run_plan(plan, results, resume=True, on_warning=warnings.append)
    assert sorted(ran) == sorted(r["key"] for r in first)
    assert len(warnings) == 1 and "2 of 2 rows were made by another build" in warnings[0], warnings
    assert "the 2 of this run's episodes among them run again" in warnings[0] and "dropped" not in warnings[0]
    assert "0123456789abcdef" in warnings[0] and "none recorded" in warnings[0]
    assert {r["build"] for r in again} == {build_id()} and len(_lines(results)) == 2

    # Rows of this build are carried as before: nothing runs.
    ran.clear()
    bench_runner.run_plan(plan, results, resume=True)
    assert ran == []

    # A stale row of an episode outside the plan is not run and not kept, and the warning says so.
    rows = _lines(results)
    results.write_text("".join(json.dumps(r) + "\n" for r in rows)
                       + json.dumps({**rows[0], "key": "ia-000|other|guarded|9|{}", "build": "old"}) + "\n")
    warnings.clear()
    bench_runner.run_plan(plan, results, resume=True, on_warning=warnings.append)
    assert ran == [] and len(warnings) == 1, warnings
    assert "1 of 3 rows" in warnings[0] and "none is in this run, so it is dropped from the file" in warnings[0]
    assert sorted(r["key"] for r in _lines(results)) == sorted(r["key"] for r in rows)


def test_a_second_run_into_an_out_in_use_is_bad_input_and_leaves_the_first_alone(tmp_path: Path, monkeypatch):
    """Two runs into one --out replaced each other's results.jsonl.partial; the first lost all its episodes."""
    _no_episode(monkeypatch)
    out = tmp_path / "out"
    bench_runner.prepare_out(out)
    with bench_runner.out_locked(out):  # the first run, still going
        res = _cli(*SMALL, "--out", str(out))
        _one_error_line(res, f"--out: {out}: is in use by another run (pid {os.getpid()})")
    assert not (out / "results.jsonl.partial").exists()
    with bench_runner.out_locked(out):  # released when the run ends: the next one takes it
        pass
