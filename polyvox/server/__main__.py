"""`python -m polyvox.server [options]`: the same as `polyvox serve [options]`."""

from __future__ import annotations

import argparse
import logging
import sys

from polyvox.server.cli import add_arguments, serve


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m polyvox.server",
                                     description="Run the polyvox streaming speech server.")
    add_arguments(parser)
    try:
        return serve(parser.parse_args(argv))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
