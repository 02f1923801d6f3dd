"""CurveZMQ for every socket: keys per role, one server identity, a ZAP authenticator (pyzmq's).

`chordpub keys generate DIR` writes, with pyzmq's zmq.auth certificate helpers, one keypair per
role: `server` is what every listening socket presents (node RPC, relay, publisher PUB and repair,
subscriber notify), so a connecting socket always knows which key to expect without knowing what
kind of process it reaches; `node`, `publisher`, `subscriber` and `client` (the CLI's one-shot
commands) are what each process presents when it connects. The server's secret key is needed only by
processes that listen (nodes, publishers, subscribers); a `client` never loads it, so a host that
only runs one-shot commands can be given DIR without `server.key_secret`. `DIR/authorized/` holds
the public keys that servers admit; removing one there revokes that role. A listening socket answers
only clients whose key is in `authorized/` (ZAP, RFC 27), and everything on the wire is encrypted
(CurveZMQ, RFC 26): no topic, key or payload in clear.

The `SocketSetup` hook of dht/transport.py is how this reaches every socket: `Curve.setup(sock,
is_server)`. A socket that is never a server (the publisher's PUB in relay mode connects to the
relay) is set up as a client.

Principals: `chordpub keys add NAME DIR` makes one more client keypair, NAME, admitted like the roles;
a process presents it with `role=NAME` (`--principal NAME`). The ZAP handler names every peer it admits
by its key's file name in `authorized/` (the ZAP User-Id), so a listening socket knows who sent each
message (`zmq.Frame.get("User-Id")`) and a policy (dht/policy.py) can say what that principal may do.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

SERVER = "server"
ROLES = ("node", "publisher", "subscriber", "client")
DOMAIN = "chordpub"
_KEY_NAME = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")


class CurveError(ValueError):
    """A keys directory that is missing, incomplete or unreadable: one clear line for the user."""


def generate(directory: Path) -> dict[str, Path]:
    """Create DIR/<role>.key (public) and DIR/<role>.key_secret for the server and every role, and
    DIR/authorized/<role>.key for the roles. Refuses to overwrite existing keys."""
    directory = Path(directory)
    existing = [r for r in (SERVER, *ROLES) if (directory / f"{r}.key_secret").exists()]
    if existing:
        raise CurveError(f"{directory} already holds keys ({', '.join(existing)}); use a new directory")
    authorized = directory / "authorized"
    authorized.mkdir(parents=True, exist_ok=True)
    written = {}
    for role in (SERVER, *ROLES):
        public, secret = zmq.auth.create_certificates(str(directory), role)
        Path(secret).chmod(0o600)
        written[role] = Path(secret)
        if role != SERVER:
            shutil.copy(public, authorized / f"{role}.key")
    return written


def add_principal(directory: Path, name: str) -> Path:
    """DIR/NAME.key and NAME.key_secret, and DIR/authorized/NAME.key: a principal's keypair, admitted
    by the servers (restart them to admit it) and named NAME in a policy."""
    directory = Path(directory)
    if not _KEY_NAME.match(name) or name == SERVER:
        raise CurveError(f"a principal's name is 1..128 of A-Z a-z 0-9 . _ : @ - (not {SERVER!r}), got {name!r}")
    if not (directory / "authorized").is_dir():
        raise CurveError(f"{directory} holds no keys (make them with `chordpub keys generate {directory}`)")
    if (directory / f"{name}.key_secret").exists():
        raise CurveError(f"{directory} already holds a key named {name!r}")
    public, secret = zmq.auth.create_certificates(str(directory), name)
    Path(secret).chmod(0o600)
    shutil.copy(public, directory / "authorized" / f"{name}.key")
    return Path(secret)


def principal_names(authorized: Path) -> dict[bytes, str]:
    """The admitted public keys (Z85) and their names: each file's name in `authorized/`."""
    names = {}
    for path in sorted(Path(authorized).glob("*.key")):
        try:
            public, _ = zmq.auth.load_certificate(str(path))
        except (OSError, ValueError):
            continue
        names[public] = path.stem
    return names


@dataclass(frozen=True)
class Curve:
    """What one process needs: its role's keypair, the server keypair, and the authorized folder."""

    directory: Path
    role: str
    public: bytes
    secret: bytes
    server_public: bytes
    server_secret: bytes | None  # None for the client role, which never listens

    @classmethod
    def load(cls, directory: Path, role: str, listen: bool | None = None) -> Curve:
        """The keys of `role`. A process that listens needs the server's secret too: every role but
        `client` (the one-shot commands) listens, unless `listen` says otherwise (a chordpub.Client
        presents the client key and listens)."""
        directory = Path(directory)
        if role == SERVER or not _KEY_NAME.match(role) or (
                role not in ROLES and not (directory / f"{role}.key_secret").exists()):
            raise CurveError(f"role must be one of {', '.join(ROLES)} or a principal made with `chordpub keys "
                             f"add NAME {directory}`, got {role!r}")
        if not directory.is_dir():
            raise CurveError(f"no keys directory {directory} (make one with `chordpub keys generate DIR`)")
        listen = role != "client" if listen is None else listen
        server_file = f"{SERVER}.key_secret" if listen else f"{SERVER}.key"
        try:
            public, secret = zmq.auth.load_certificate(str(directory / f"{role}.key_secret"))
            server_public, server_secret = zmq.auth.load_certificate(str(directory / server_file))
        except (OSError, ValueError) as exc:
            raise CurveError(f"cannot read the {role} or server keys in {directory}: {exc}"
                             + (" (a process that listens needs server.key_secret)" if listen else "")) from None
        if not (directory / "authorized").is_dir():
            raise CurveError(f"{directory}/authorized is missing (it lists the public keys servers admit)")
        return cls(directory, role, public, secret, server_public, server_secret)

    def setup(self, sock: zmq.Socket, is_server: bool) -> None:
        """The SocketSetup hook: a server presents the server identity and asks ZAP; a client
        presents its role's key and expects the server's."""
        if is_server:
            if self.server_secret is None:
                raise CurveError(f"the {self.role} role has no server key to listen with")
            sock.curve_publickey = self.server_public
            sock.curve_secretkey = self.server_secret
            sock.curve_server = True
            sock.zap_domain = DOMAIN.encode()
        else:
            sock.curve_publickey = self.public
            sock.curve_secretkey = self.secret
            sock.curve_serverkey = self.server_public


_authenticators: dict[int, ThreadAuthenticator] = {}


def start_authenticator(curve: Curve, context: zmq.Context | None = None) -> ThreadAuthenticator:
    """One ZAP handler per context, admitting the keys in DIR/authorized (started once) and naming
    each peer by its key's file name there (its principal)."""
    context = context or zmq.Context.instance()
    auth = _authenticators.get(id(context))
    if auth is None:
        auth = ThreadAuthenticator(context)
        names = principal_names(curve.directory / "authorized")
        auth.curve_user_id = lambda key: names.get(z85.encode(key), z85.encode(key).decode("ascii"))
        auth.start()
        auth.configure_curve(domain=DOMAIN, location=str(curve.directory / "authorized"))
        _authenticators[id(context)] = auth
    return auth


def stop_authenticator(context: zmq.Context) -> None:
    """Stop the ZAP handler of one context (a chordpub.Client's, at close)."""
    auth = _authenticators.pop(id(context), None)
    if auth is not None:
        auth.stop()


def stop_authenticators() -> None:
    for auth in _authenticators.values():
        auth.stop()
    _authenticators.clear()


def socket_setup(directory: Path | None, role: str):  # -> SocketSetup | None
    """The hook for a process of `role` given `--curve DIR` (None without it: plain TCP)."""
    if directory is None:
        return None
    curve = Curve.load(directory, role)
    start_authenticator(curve)
    return curve.setup
