"""python -m kvgen precompile ...: see kvgen/precompile.py."""

import sys


def main():
    if len(sys.argv) < 2 or sys.argv[1] != "precompile":
        print("usage: python -m kvgen precompile [--help]", file=sys.stderr)
        return 2
    from .precompile import main as precompile

    return precompile(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
