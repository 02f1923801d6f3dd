"""Spark Connect, both ends: a server on loopback that many analyses share, and a session that uses one.

A local master starts a driver JVM for every `chordpub analyze`, `study report`, `demo` and
notebook: 10-20 s and 15-25 CPU-seconds before the first query, most of a small job's cost. Spark
Connect (Spark 3.4 and later) splits the driver from its clients: the server is one long-lived
driver JVM with a gRPC endpoint, and a client is a thin Python process that sends it DataFrame
plans. With `chordpub spark-server` running, `--master sc://127.0.0.1:15002` (or SPARK_MASTER)
makes each analysis such a client: measured on a small run, 1.7 CPU-seconds in the client and about
5 in the warm server, against 22 for a local driver of its own.

The server reads the trace files by their paths, so it runs where the traces are, as any cluster's
Connect server reads its cluster's storage. The analyses use the DataFrame API only, which is all a
Connect client has (traces/spark.py); `sim paper --engine spark` ships Python tasks and needs a
classic master.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from dht.processes import die_with_parent

CONNECT_SCHEME = "sc://"
CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"  # pyspark sets it in a process that opened a Connect session
DEFAULT_PORT = 15002  # Spark Connect's own default
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
LOG_TAIL = 2000  # characters of the server's log quoted when it does not come up


class SparkServerError(RuntimeError):
    """The Connect server did not come up: the message says why, with the end of its log."""


def is_connect(master: str | None) -> bool:
    return bool(master) and master.startswith(CONNECT_SCHEME)


def connect_session(url: str):
    """A Spark Connect session on `url` (sc://HOST:PORT), with the project's session settings."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    return spark


def is_remote_session(spark) -> bool:  # noqa: ANN001 - classic or Connect SparkSession
    return type(spark).__module__.startswith("pyspark.sql.connect")


def server_argv(port: int, master: str, java_options: str = "") -> list[str]:
    """spark-submit running the Connect server on loopback, from pyspark's own jars (or SPARK_HOME's)."""
    from traces.spark_driver import spark_jars

    jars = spark_jars()
    if jars is None:
        raise SparkServerError("no Spark jars found (pyspark's, or SPARK_HOME's)")
    log4j = Path(__file__).with_name("log4j2.properties")
    confs = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
             "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
             "spark.sql.session.timeZone": "UTC",
             # a server of small jobs (its JVM's options say so too): compiling each query's generated code
             # costs more than it saves (the suite's Spark tests and notebooks: 296 CPU-s against 349). Adaptive
             # plans stay: they coalesce the 200 shuffle partitions a client's session starts with (without
             # them, 615 CPU-s)
             "spark.sql.codegen.wholeStage": "false"}
    if master.startswith("local"):
        confs |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    argv = [str(jars.parent / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", master,
            "--name", "chordpub-spark-server"]
    for name, value in confs.items():
        argv += ["--conf", f"{name}={value}"]
    return argv + ["--driver-java-options", f"-Dlog4j.configurationFile={log4j.as_uri()} {java_options}".strip()]


class SparkServer:
    """One Connect server process: `start()`, `wait_ready()`, `url`, `stop()` (also a context manager)."""

    def __init__(self, port: int = DEFAULT_PORT, master: str = "local[*]", log: Path | None = None) -> None:
        self.port, self.master, self.log = port, master, log
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"{CONNECT_SCHEME}127.0.0.1:{self.port}"

    def start(self) -> SparkServer:
        from traces.spark_driver import QUICK_JVM, check_java, java_binary, spark_jars

        check_java()
        with socket.socket() as probe:  # else wait_ready would take whatever listens there for the server
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError as exc:
                raise SparkServerError(f"127.0.0.1:{self.port} is not free ({exc.strerror})") from None
        options = QUICK_JVM  # a server of small jobs: see traces/spark.py's session
        java, jars = java_binary(), spark_jars()
        if java is not None and jars is not None:
            from traces.class_archive import archive_path, jvm_options

            options = f"{options} {jvm_options(archive_path(java, jars, QUICK_JVM))}".strip()
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
        env.pop("SPARK_MASTER", None)
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(server_argv(self.port, self.master, options), stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, env=env,
                                         preexec_fn=die_with_parent)  # noqa: PLW1509 - no threads yet
        finally:
            if self.log:
                out.close()
        return self

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until the server accepts connections; SparkServerError if it exits or the deadline passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise SparkServerError(f"the Spark Connect server exited{self._tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise SparkServerError(f"the Spark Connect server did not listen on port {self.port} within "
                               f"{timeout:g} s{self._tail()}")

    def _tail(self) -> str:
        if not self.log or not self.log.exists():
            return ""
        return f"; the end of {self.log}:\n{self.log.read_text(errors='replace')[-LOG_TAIL:]}"

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after `grace` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> SparkServer:
        self.start().wait_ready()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
