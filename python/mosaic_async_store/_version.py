"""The package version, in a module every layer may import (the CLI prints it)."""

__version__ = "0.1.0"
