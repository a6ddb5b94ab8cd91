"""The Space's entry point and ``python app.py`` in a checkout: the app lives in :mod:`marlin_demo.app`."""

from marlin_demo.app import build, main, parse_args

__all__ = ["build", "main", "parse_args"]

if __name__ == "__main__":
    main()
