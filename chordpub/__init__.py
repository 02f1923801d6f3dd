"""chordpub: DHT-based publish/subscribe. The Python API is `Client`; the command line is `chordpub`."""

from pubsub.client import Client
from pubsub.delivery import Subscription
from pubsub.message import DeadLetter, Message

__version__ = "0.1.0"
__all__ = ["Client", "DeadLetter", "Message", "Subscription", "__version__"]
