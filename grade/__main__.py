import sys

try:
    from .commands.cli import main
except KeyboardInterrupt:  # Ctrl-C while the command line itself is imported
    print("interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
