"""Moved to `arena.twin.pg.postgres` (shared with slack-spine); kept so existing imports keep working."""

from arena.twin.pg.postgres import *  # noqa: F401,F403
from arena.twin.pg.postgres import __all__  # noqa: F401
