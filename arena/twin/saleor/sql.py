"""Moved to `arena.twin.pg.sql` (shared with slack-spine); kept so existing imports keep working."""

from arena.twin.pg.sql import *  # noqa: F401,F403
from arena.twin.pg.sql import __all__  # noqa: F401
