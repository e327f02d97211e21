"""The ``ctxsim`` command line: the entry point and one module per subcommand."""

from simulator.cli.app import build_parser, main
from simulator.cli.common import POLICY_PRESETS, policy_from_spec

__all__ = ["POLICY_PRESETS", "build_parser", "main", "policy_from_spec"]
