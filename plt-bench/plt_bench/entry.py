"""The `plt-bench` command's entry point: the signal handlers first, then the CLI.

Loading the CLI's modules takes about a tenth of a second; a Ctrl-C in that time used to print a
raw KeyboardInterrupt traceback. Here the handlers are in place before anything heavy is imported,
so a signal at any moment is an ending like any other (plt_bench.signals)."""

from __future__ import annotations

import sys

from . import signals


def main() -> int:
    signals.install()
    try:
        from .cli import main as cli_main
    except signals.Interrupted as e:  # before anything was made: nothing to clean
        signals.settle()
        print("\ninterrupted", file=sys.stderr)
        return e.exit_code
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
