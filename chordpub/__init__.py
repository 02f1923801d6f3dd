"""chordpub: the command line and the jobs that tie the packages together."""

__version__ = "0.1.0"
