"""chordpub: DHT-based publish/subscribe. The Python API is `Client`; the command line is `chordpub`.

The API's names are imported when first used (PEP 562), so that a process that only runs a node or
a one-shot command (`python -m chordpub ...`) does not pay for the client's imports."""

from importlib import import_module

__version__ = "0.1.0"  # setup.cfg reads it from here: one definition, and `--version` reads no metadata
_API = {"Client": "pubsub.client", "Subscription": "pubsub.delivery", "DeadLetter": "pubsub.message",
        "Message": "pubsub.message"}
__all__ = ["Client", "DeadLetter", "Message", "Subscription", "__version__"]


def __getattr__(name: str) -> object:
    if name in _API:
        value = getattr(import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'chordpub' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
