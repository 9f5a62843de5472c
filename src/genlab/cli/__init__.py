"""Entry points: Hydra mains, config validation, exit codes."""

from genlab.cli.resolvers import register as _register_resolvers

_register_resolvers()
