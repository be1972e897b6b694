"""The slack-spine substrate of the twin (Incident-Arena tasks 007-019). Importing it registers `slack-spine`."""

from arena.twin.slack.substrate import SlackSpine, SlackSpec

__all__ = ["SlackSpine", "SlackSpec"]
