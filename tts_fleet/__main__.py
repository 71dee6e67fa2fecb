"""`python -m tts_fleet` runs the `tts-fleet` command."""

from tts_fleet.cli.main import main

if __name__ == "__main__":
    main()
