"""`python -m fleet` runs the `tts-fleet` command."""

from fleet.cli import main

if __name__ == "__main__":
    main()
