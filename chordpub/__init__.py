"""chordpub: DHT-based publish/subscribe. The Python API is `Client`; the command line is `chordpub`."""

from importlib.metadata import PackageNotFoundError, version

from pubsub.client import Client
from pubsub.delivery import Subscription
from pubsub.message import DeadLetter, Message

try:
    __version__ = version("chordpub")  # setup.cfg's, once installed
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
__all__ = ["Client", "DeadLetter", "Message", "Subscription", "__version__"]
