"""Failures a user can cause or fix, with the exit status the command line gives each.

The CLI (``reasonwire.workers.cli``) prints such a failure as one line on stderr and exits
with its :attr:`UserError.exit_status` — never a traceback (README "Command
line" lists the statuses). Everything else is a bug and may show one.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad arguments or input: the message names the cause and the argument or path."""

    exit_status = 2


class ConfigurationError(UserError):
    """A setting (environment variable) that cannot be used; the message names the variable."""

    exit_status = 2


class ServiceUnreachable(UserError):
    """Kafka or Redis did not answer in time; the message names the service and its variable."""

    exit_status = 3
