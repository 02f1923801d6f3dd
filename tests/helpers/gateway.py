"""`chordpub gateway` as a process for the tests, a Subscribe stream read on a thread, and test
certificates (tests/integration/test_gateway*.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc

from chordpub.v1 import pubsub_pb2 as pb
from chordpub.v1 import pubsub_pb2_grpc as rpc
from tests.helpers.ports import free_ports

HB = 0.3


class GatewayProcess:
    """`chordpub gateway` as a process, and a channel to it (TLS when `tls_ca` is given, presenting the
    `client` (key, certificate) pair if any)."""

    def __init__(self, via: str, workdir: Path, port: int | None = None, *args: str, tls_ca: Path | None = None,
                 client: tuple[Path, Path] | None = None) -> None:
        self.via, self.workdir, self.args = via, workdir, args
        self.tls_ca, self.client = tls_ca, client
        self.port = port or free_ports(1)[0]
        self.data = workdir / "gateway-data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.start()

    def start(self) -> None:
        self.log = self.workdir / "gateway.log"
        self.proc = subprocess.Popen([sys.executable, "-m", "chordpub", "gateway", "--via", self.via, "--listen",
                                      f"127.0.0.1:{self.port}", "--data-dir", str(self.data), "--heartbeat",
                                      str(HB), *self.args], stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "a"), start_new_session=True)  # noqa: SIM115
        if self.tls_ca is None:
            self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        else:
            key, cert = (self.client[0].read_bytes(), self.client[1].read_bytes()) if self.client else (None, None)
            self.channel = grpc.secure_channel(f"127.0.0.1:{self.port}", grpc.ssl_channel_credentials(
                self.tls_ca.read_bytes(), private_key=key, certificate_chain=cert))
        grpc.channel_ready_future(self.channel).result(timeout=30)
        self.stub = rpc.PubSubStub(self.channel)

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) / 1024

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Reader:
    """A Subscribe stream read on a thread; `in_place()` once the gateway says the subscription is."""

    def __init__(self, stub: rpc.PubSubStub, slow: float = 0.0, metadata: list | None = None,
                 **request) -> None:  # noqa: ANN003
        self.call = stub.Subscribe(pb.SubscribeRequest(**request), metadata=metadata)
        self.got: list[pb.Delivery] = []
        self.error: grpc.RpcError | None = None
        self.slow = slow
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def in_place(self) -> None:
        assert dict(self.call.initial_metadata()).get("chordpub-subscribed"), "no subscription"

    def _read(self) -> None:
        try:
            for d in self.call:
                self.got.append(d)
                if self.slow:
                    time.sleep(self.slow)  # a caller that reads slowly (its own work)
        except grpc.RpcError as exc:
            self.error = exc

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(10)


def make_certs(d: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1, and a client certificate whose common name is alice."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=test-ca")
    for name, extra in (("server", "subjectAltName=IP:127.0.0.1"), ("alice", "extendedKeyUsage=clientAuth")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={'127.0.0.1' if name == 'server' else name}")
        (d / f"{name}.ext").write_text(extra + "\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    return {n: d / n for n in ("ca.pem", "server.pem", "server.key", "alice.pem", "alice.key")}
