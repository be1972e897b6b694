"""A set-user-ID or set-group-ID bit is never part of a repair (issue #25: through the unauthenticated transport a
second user was allowed a setuid copy of bash). SRE-PRIV-011 denies every spelling that turns one on; modes
without it stay allowed (the negative controls)."""

from __future__ import annotations

import pytest

from guardrail.actions.classifiers.files import sets_id_bit
from guardrail.adapters.session import load_engine
from guardrail.context import IncidentContext
from guardrail.guard import Guard


@pytest.fixture(scope="module")
def guard():
    return Guard(load_engine(), IncidentContext())


def denies(guard, cmd: str) -> set[str]:
    return {f.id for d in guard.before(cmd).decisions for f in d.denies}


@pytest.mark.parametrize("cmd", [
    "cp /bin/bash /tmp/rootsh && chmod u+s /tmp/rootsh", "chmod 4755 /tmp/rootsh", "chmod 04755 /tmp/rootsh",
    "chmod 2755 /tmp/x", "chmod 6755 /tmp/x", "chmod +s /tmp/x", "chmod g+s /tmp/x", "chmod u=rwxs /tmp/x",
    "chmod a+rs,o-w /tmp/x", "chmod -- u+s /tmp/x", "sh -c 'chmod u+s /tmp/x'", "install -m 4755 /bin/bash /tmp/x",
    "install --mode=u+s /bin/bash /tmp/x", "install --mo 4755 /bin/bash /tmp/x", "chmod 'u+s' /tmp/x",
    "xargs chmod u+s <<< /tmp/x",
])
def test_turning_on_a_setuid_or_setgid_bit_is_denied(guard, cmd):
    assert "SRE-PRIV-011" in denies(guard, cmd)


@pytest.mark.parametrize("cmd", ["chmod 755 /tmp/x", "chmod u-s /tmp/x", "chmod 0644 /tmp/x", "chmod o+s /tmp/x",
                                 "chmod -R g+w /tmp/dir", "install -m 644 a /tmp/a", "chmod 1777 /tmp/shared"])
def test_modes_without_the_bit_are_not_denied_by_it(guard, cmd):
    assert "SRE-PRIV-011" not in denies(guard, cmd)


@pytest.mark.parametrize("mode,sets", [("4755", True), ("755", False), ("u+s", True), ("ug+xs", True),
                                       ("=s", True), ("u-s", False), ("o+s", False), ("u+x,g+s", True),
                                       ("1777", False), ("u=rwx", False)])
def test_the_mode_reading(mode, sets):
    assert sets_id_bit(mode) is sets
