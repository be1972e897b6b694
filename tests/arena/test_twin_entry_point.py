"""`--env twin:<scenario>[@seed]` resolves through the guardrail.environments entry point to the scenario's twin."""

import pytest

from guardrail.envs import resolve_environment
from guardrail.errors import InputError


def test_twin_env_resolves_and_runs_operator_commands():
    env = resolve_environment("twin:ia-011@3")
    assert env.describe().name == "twin:slack-spine"
    out = env.run("kubectl get pods")
    assert out.exit_code == 0 and "svc-channel" in out.stdout


def test_same_seed_same_world_and_bad_specs_are_input_errors():
    a = resolve_environment("twin:ia-006@1").run("kubectl get pods").stdout
    b = resolve_environment("twin:ia-006@1").run("kubectl get pods").stdout
    assert a == b
    with pytest.raises(InputError):
        resolve_environment("twin:")
    with pytest.raises(InputError):
        resolve_environment("twin:ia-006@x")
