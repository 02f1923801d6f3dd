"""`chordpub gateway`: serve the ring to gRPC callers in any language (chordpub/gateway.py)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import typer

from chordpub.cli_common import (
    CURVE_HELP,
    HOST_HELP,
    advertise_option,
    bind_option,
    clean_errors,
    connect_timeout_option,
    endpoint_arg,
    fail,
    listen_addresses,
    log_file_option,
    log_level_option,
    setup_logging,
)


@clean_errors
def gateway(
    via: str = typer.Option(..., help="Any node of the ring, H:P."),
    listen: str = typer.Option("127.0.0.1:50051", help="Where gRPC callers connect, HOST:PORT (port 0: a free one, "
                               "said on stderr)."),
    host: str = typer.Option("127.0.0.1", help=HOST_HELP + " The gateway's clients listen there (publishers "
                             "serve history and repair, subscribers take acks), toward the ring."),
    bind: str = bind_option(),
    advertise: str = advertise_option(),
    curve: Path = typer.Option(None, help=CURVE_HELP),
    principal: str = typer.Option("client", help="With --curve: the key the gateway presents to the ring."),
    data_dir: Path = typer.Option(None, help="Where durable gRPC subscriptions keep their positions (one "
                                  "directory each inside): restarted with it, they resume."),
    tls_cert: Path = typer.Option(None, "--tls-cert", help="Serve TLS with this certificate (PEM) ..."),
    tls_key: Path = typer.Option(None, "--tls-key", help="... and this private key (PEM)."),
    tls_client_ca: Path = typer.Option(None, "--tls-client-ca", help="Require client certificates signed by this "
                                       "CA; a caller's principal is its certificate's common name."),
    tokens: Path = typer.Option(None, "--tokens", help="Bearer tokens: a file of 'TOKEN PRINCIPAL' lines; a caller "
                                "sending 'authorization: Bearer TOKEN' is that principal."),
    acl: Path = typer.Option(None, "--acl", help="A policy (docs/security.md) the gateway enforces for its callers, "
                             "by their principal (from --tokens or client certificates)."),
    heartbeat: float = typer.Option(1.0, min=0.05, help="Seconds between lease renewals of the gateway's clients."),
    max_streams: int = typer.Option(256, help="Subscribe streams served at once at most (each has a client of its "
                                    "own); more are refused with RESOURCE_EXHAUSTED."),
    queue: int = typer.Option(1000, help="Messages a stream holds for a slow caller: beyond, a best-effort stream "
                              "drops (counted in each Delivery's 'dropped'), a reliable one is held back."),
    connect_timeout: float = connect_timeout_option(),
    log_level: str = log_level_option("INFO"),
    log_file: Path = log_file_option(),
) -> None:
    """Serve chordpub's gRPC API (proto/chordpub/v1/pubsub.proto: Publish, PublishStream, Subscribe, Ack,
    Nak, TopicInfo) with health checking and server reflection, until SIGINT/SIGTERM."""
    from chordpub.gateway import Gateway, serve

    endpoint_arg(via)
    setup_logging(log_level, log_file)
    if not 1 <= max_streams <= 4096:
        fail(f"--max-streams must be in 1..4096, got {max_streams}")
    if not 1 <= queue <= 100_000:
        fail(f"--queue must be in 1..100000, got {queue}")
    if (tls_cert is None) != (tls_key is None):
        fail("--tls-cert and --tls-key go together")
    if tls_client_ca is not None and tls_cert is None:
        fail("--tls-client-ca needs --tls-cert and --tls-key")
    if acl is not None:
        from dht.policy import Policy, PolicyError

        try:
            Policy.load(acl)  # the gateway judges its callers itself: no curve needed for that
        except PolicyError as exc:
            fail(str(exc))
        if tokens is None and tls_client_ca is None:
            fail("--acl needs a way to name callers: --tokens FILE or --tls-client-ca")
    tls = None
    if tls_cert is not None:
        try:
            tls = (tls_key.read_bytes(), tls_cert.read_bytes(),
                   tls_client_ca.read_bytes() if tls_client_ca is not None else None)
        except OSError as exc:
            fail(f"cannot read {exc.filename}: {exc.strerror}")
    if data_dir is not None and not data_dir.is_dir():
        fail(f"--data-dir {data_dir} does not exist")
    addresses = listen_addresses(host, bind, advertise)
    gw = Gateway(via, host=addresses.host, bind=addresses.bind, curve=curve, principal=principal,
                 data_dir=data_dir, acl=acl, tokens=tokens, heartbeat=heartbeat, max_streams=max_streams,
                 queue=queue, timeout=connect_timeout)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server = serve(gw, listen, tls)
    except (OSError, RuntimeError) as exc:
        gw.close()
        fail(f"cannot listen on {listen}: {exc}")
    host = listen.rsplit(":", 1)[0]
    typer.echo(f"gateway serving on {host}:{server.port} ({'TLS' if tls else 'plaintext'}), ring via {via}", err=True)
    stop.wait()
    server.stop(grace=2).wait(5)
    gw.close()
