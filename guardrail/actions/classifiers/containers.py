"""docker, podman and crictl on the operator host: container lifecycle (a restart is a restart) and reads.

Registered for `docker`, `podman`, `crictl`, `nerdctl`; called by `Normaliser.dispatch`. `<tool> exec CONTAINER
CMD...` is unwrapped by `guardrail.actions.wrappers.container_exec` (with `CONTAINER_EXEC` from here), like
`kubectl exec`: the exec itself reads nothing and changes nothing, the command it runs is classified on its own.
"""

from __future__ import annotations

from guardrail.actions.classifiers.base import OptionSpec, register
from guardrail.actions.classifiers.staples import kill_args, leaves_running
from guardrail.actions.invocation import Invocation
from guardrail.actions.model import UNKNOWN, Action, Layer, Target

__all__ = ["ContainerRuntime", "CONTAINER_EXEC", "CONTAINER_RUN"]

# `docker exec` options that take a value; everything after the container name is the command.
CONTAINER_EXEC = OptionSpec.of(["-u", "--user", "-w", "--workdir", "-e", "--env", "--env-file", "--detach-keys"],
                               stop_at_positional=True)
# `docker run` / `create` options that take a value; the first positional is the image, the rest its command.
CONTAINER_RUN = OptionSpec.of([
    "-a", "--attach", "--add-host", "--annotation", "--blkio-weight", "--blkio-weight-device", "--cap-add",
    "--cap-drop", "--cgroup-parent", "--cgroupns", "--cidfile", "--cpu-count", "--cpu-percent", "--cpu-period",
    "--cpu-quota", "--cpu-rt-period", "--cpu-rt-runtime", "-c", "--cpu-shares", "--cpus", "--cpuset-cpus",
    "--cpuset-mems", "--detach-keys", "--device", "--device-cgroup-rule", "--device-read-bps", "--device-read-iops",
    "--device-write-bps", "--device-write-iops", "--dns", "--dns-opt", "--dns-option", "--dns-search",
    "--domainname", "--entrypoint", "-e", "--env", "--env-file", "--expose", "--gpus", "--group-add",
    "--health-cmd", "--health-interval", "--health-retries", "--health-start-period", "--health-start-interval",
    "--health-timeout", "-h", "--hostname", "--ip", "--ip6", "--ipc", "--isolation", "--kernel-memory", "-l",
    "--label", "--label-file", "--link", "--link-local-ip", "--log-driver", "--log-opt", "--mac-address", "-m",
    "--memory", "--memory-reservation", "--memory-swap", "--memory-swappiness", "--mount", "--name", "--network",
    "--net", "--network-alias", "--net-alias", "--oom-score-adj", "--pid", "--pids-limit", "--platform", "-p",
    "--publish", "--pull", "--restart", "--runtime", "--security-opt", "--shm-size", "--stop-signal",
    "--stop-timeout", "--storage-opt", "--sysctl", "--tmpfs", "--ulimit", "-u", "--user", "--userns", "--uts", "-v",
    "--volume", "--volume-driver", "--volumes-from", "-w", "--workdir", "--pod", "--arch", "--os", "--variant",
    "--secret", "--uidmap", "--gidmap", "--tz", "--umask", "--unsetenv", "--pidfile", "--requires", "--timeout",
    "--init-path", "--seccomp-policy", "--sdnotify", "--preserve-fds", "--hostuser", "--passwd-entry",
], {"--volume": "-v", "--env": "-e", "--user": "-u", "--workdir": "-w", "--publish": "-p", "--label": "-l",
    "--hostname": "-h", "--memory": "-m", "--cpu-shares": "-c", "--attach": "-a", "--net": "--network"},
    stop_at_positional=True)
_READ = frozenset({"ps", "logs", "inspect", "images", "stats", "top", "version", "info", "port", "diff",
                   "events", "history", "search", "pods", "stopped", "list"})
# Object groups whose listing and inspection are reads; any other subcommand (volume rm/prune, network disconnect,
# image prune, system prune) changes what containers run with or removes their data.
_GROUPS = frozenset({"network", "volume", "image", "system", "builder", "context", "plugin", "secret", "config"})
_GROUP_READS = frozenset({"ls", "list", "inspect", "history", "df", "info", "events"})
# Options of kill / stop / restart that take a value (the signal, the grace period): not a container's name.
_SIGNAL_OPTIONS = OptionSpec.of(["-s", "--signal", "-t", "--time", "--timeout"], {"--signal": "-s", "--time": "-t",
                                                                                 "--timeout": "-t"})
_LIFECYCLE = frozenset({"restart", "stop", "kill", "rm", "start", "pause", "unpause", "update", "rmi", "create",
                        "run", "cp", "commit", "rename", "stopp", "rmp", "runp"})


@register
class ContainerRuntime:
    """docker / podman / crictl / nerdctl."""

    commands = ("docker", "podman", "crictl", "nerdctl")

    def classify(self, inv: Invocation) -> list[Action]:
        words = [str(a) for a in inv.args if not str(a).startswith("-")]
        if not words:
            return [inv.action(inv.name, "help", mutating=False)]
        verb = words[0]
        if verb in ("container", "pod") and len(words) > 1:
            verb, words = words[1], words[1:]
        name = words[1] if len(words) > 1 else ""
        lead = [str(a) for a in inv.args[:2]]
        skip = 1 if lead[:1] == [verb] else 2 if lead == ["container", verb] else 0
        if verb in ("run", "create") and skip and inv.name != "crictl":
            # The container made: its --name, else the image (the words before it are option values).
            run = CONTAINER_RUN.parse(inv.args[skip:])
            name = str(run.get("--name") or (run.positionals[0] if run.positionals else ""))
        signal = None
        if verb in ("kill", "stop", "restart") and skip:
            # `docker kill -s HUP pgbouncer`: the option's value is the signal, not a container.
            sig = _SIGNAL_OPTIONS.parse(inv.args[skip:])
            name = str(sig.positionals[0]) if sig.positionals else ""
            if verb == "kill" and sig.get("-s") is not None:
                signal = kill_args(["-" + str(sig.get("-s")).lstrip("-")])[0]
        target = Target(kind="container", name=name)
        if verb in _READ or verb.startswith("ls"):
            return [inv.action(inv.name, verb, target=target, mutating=False)]
        if verb in _GROUPS and inv.name != "crictl":
            sub = words[1] if len(words) > 1 else "ls"
            if sub in _GROUP_READS:
                return [inv.action(inv.name, f"{verb} {sub}", target=target, mutating=False)]
            return [inv.action(inv.name, f"{verb} {sub}", target=target, mutating=UNKNOWN,
                               opaque_reason=f"{inv.name} {verb} {sub} removes or rewires what containers use (a "
                               "volume's data, a network); the guard does not judge it")]
        if verb == "kill" and signal is not None and leaves_running(signal, None):
            # A signal the container's process handles and keeps running (HUP: reload its config), as `kill -HUP`
            # of the same process is judged: not a restart.
            return [inv.action(inv.name, verb, target=target, mutating=True, layer=Layer.NONE,
                               details={"signal": "-" + signal, "restart": False})]
        if verb in _LIFECYCLE:
            # pause freezes every process of the container: to its clients it is down, as stopped.
            details = {"restart": True} if verb in ("restart", "stop", "kill", "rm", "stopp", "rmp", "pause") else {}
            if signal is not None:
                details["signal"] = "-" + signal
            return [inv.action(inv.name, verb, target=target, mutating=True, layer=Layer.NONE, details=details)]
        return [inv.action(inv.name, verb, target=target, mutating=UNKNOWN,
                           opaque_reason=f"{inv.name} {verb!r} is not a verb the guard knows")]
