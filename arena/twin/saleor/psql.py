"""Moved to `arena.twin.pg.psql` (shared with slack-spine); kept so existing imports keep working."""

from arena.twin.pg.psql import *  # noqa: F401,F403
from arena.twin.pg.psql import __all__  # noqa: F401
