"""The agent's tool surface per substrate (arena/twin/tools.yaml): only the real `main` pod's programs answer,
the data is validated on load, and Kubernetes authority is what the surface says."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from arena.scenario import load_scenario
from arena.twin import tools
from arena.twin.engine import TwinSpec, build_twin
from arena.twin.tools import ToolSurface, ToolSurfaces
from guardrail.errors import ScenarioError

ONE_PER_SUBSTRATE = {"frappe": "ia-001", "slack-spine": "ia-018", "saleor": "ia-006"}


@pytest.mark.parametrize("substrate,sid", sorted(ONE_PER_SUBSTRATE.items()))
def test_each_substrate_answers_exactly_its_surfaces_programs(substrate, sid):
    env = build_twin(load_scenario(sid).twin, seed=0)
    surfaces = tools.tool_surfaces()
    assert set(env.shell.handlers) == surfaces.programs(substrate)
    for missing in ("helm", "python3", "docker"):
        r = env.run(f"{missing} version")
        assert (r.exit_code, r.stderr) == (127, f"bash: {missing}: command not found\n")
    assert env.run("submit_incident_report --service db").exit_code == 0


def test_frappe_has_the_helper_and_no_pod_authority():
    env = build_twin(load_scenario("ia-001").twin, seed=0)
    assert env.run("reconfigure-infra.sh").exit_code == 2
    r = env.run("kubectl delete pod redis-queue-master-0")
    assert r.exit_code == 1 and "is forbidden" in r.stderr
    assert env.run("kubectl get pods").exit_code == 0  # the surface keeps read authority (docs/fidelity.md)


def test_a_scenario_may_not_grant_writes_the_surface_lacks():
    spec = load_scenario("ia-001").twin.model_dump()
    spec["rbac"] = ["delete"]
    with pytest.raises(ValidationError, match="tools.yaml"):
        TwinSpec.model_validate(spec)


def test_a_stand_in_must_be_one_of_the_programs():
    with pytest.raises(ValidationError, match="stand_in_for names programs not in programs"):
        ToolSurface(programs=["psql"], stand_in_for={"redis-cli": "python3 raw RESP"})


def test_a_surface_naming_a_program_nobody_implements_fails_when_the_twin_is_built(monkeypatch):
    real = tools.tool_surfaces()
    bad = ToolSurfaces(core=real.core, substrates={**real.substrates, "frappe": ToolSurface(
        programs=[*real.surface("frappe").programs, "frappe-doctor"], kubernetes="read")})
    monkeypatch.setattr("arena.twin.engine.tool_surfaces", lambda: bad)
    with pytest.raises(ScenarioError, match="frappe-doctor"):
        build_twin(load_scenario("ia-001").twin, seed=0)


def test_no_kubernetes_authority_is_the_clients_connection_refused(monkeypatch):
    real = tools.tool_surfaces()
    confined = ToolSurfaces(core=real.core, substrates={**real.substrates, "frappe": real.surface("frappe").model_copy(
        update={"kubernetes": "none"})})
    monkeypatch.setattr("arena.twin.engine.tool_surfaces", lambda: confined)
    env = build_twin(load_scenario("ia-001").twin, seed=0)
    r = env.run("kubectl get pods")
    assert r.exit_code == 1 and "localhost:8080 was refused" in r.stderr
    # An operator's read-only view still reads.
    assert env.operator_view().run("kubectl get pods").exit_code == 0


def test_the_operator_view_reads_the_release_and_writes_nothing():
    env = build_twin(load_scenario("ia-001").twin, seed=0)
    view = env.operator_view()
    assert "agentSurface" in view.run("helm get values frappe").stdout
    assert view.run("helm upgrade frappe /opt/charts/frappe --reuse-values").exit_code == 1
    assert view.run("kubectl delete pod redis-queue-master-0").exit_code == 1
    assert view.clock is env.clock


def test_the_shipped_file_loads():
    surfaces = tools.tool_surfaces()
    assert set(surfaces.substrates) == set(ONE_PER_SUBSTRATE)
    assert "helm" not in surfaces.programs("frappe") and "mysql" in surfaces.programs("frappe")
