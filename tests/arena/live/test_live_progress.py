"""`guardrail run --env live` says what it is doing while the stack comes up (it printed nothing for 93 s): the
StageLog on an injected clock, and the command's wiring (stderr only; `--json -` keeps stdout to the episode JSON).
The stack's own lines (each server up) are read from a real stack in test_live_stack_cleanup."""

from __future__ import annotations

import json

from click.testing import CliRunner

from arena.live.progress import StageLog


class FakeClock:
    def __init__(self) -> None:
        self.t = 500.0

    def __call__(self) -> float:
        return self.t


def test_each_stage_is_said_and_a_long_one_is_said_to_go_on():
    clock, lines = FakeClock(), []
    log = StageLog(lines.append, clock=clock, every_s=30.0)
    log.tick()
    assert lines == []  # nothing begun, nothing to say
    log("starting the servers: postgres, redis-queue")
    clock.t += 4.2
    log.note("postgres up (4.2 s)")
    clock.t += 20
    log.tick()  # 20 s since the last line: quiet
    clock.t += 15
    log.tick()
    clock.t += 10
    log.tick()  # 10 s after the "still" line: quiet again
    clock.t += 85
    log("the episode: the agent at work (guarded arm), then the gates")
    assert lines == ["live [0:00] starting the servers: postgres, redis-queue",
                     "live [0:04] postgres up (4.2 s)",
                     "live [0:39] still starting the servers: postgres, redis-queue (0:39)",
                     "live [2:14] the episode: the agent at work (guarded arm), then the gates"]


def test_run_env_live_prints_progress_on_stderr_and_only_the_episode_on_stdout(monkeypatch):
    import arena.live.stack as stack
    import arena.live.world as world
    from arena.episode import run_episode
    from guardrail.cli import _register, cli

    monkeypatch.setattr(stack, "missing_requirements", lambda: [])
    monkeypatch.setattr(stack, "install_cleanup", lambda: None)  # no process-wide signal handlers in pytest

    def fake_live_episode(sc, agent, *, arm, seed, guard_factory, progress):
        progress("starting the servers: postgres")
        progress.note("postgres up (1.0 s)")
        return run_episode(sc, agent, arm=arm, seed=seed, guard_factory=guard_factory)  # on the twin, quickly

    monkeypatch.setattr(world, "run_live_episode", fake_live_episode)
    _register()
    res = CliRunner().invoke(cli, ["run", "ia-006", "--env", "live", "--agent", "replay:reference", "--json", "-"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["scenario"] == "ia-006"
    err = res.stderr.splitlines()
    assert err[0] == "live [0:00] starting the servers: postgres" and err[1].endswith("] postgres up (1.0 s)")
