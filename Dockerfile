# One image for every chordpub process: a discovery node by default; pub, sub, ring check ... by
# giving another command. Nodes and clients need no Java; `chordpub analyze` does (install
# openjdk-17-jre-headless in an image of your own for it). docs/deploy.md explains the addresses.
FROM python:3.11-slim

WORKDIR /opt/chordpub
COPY setup.cfg pyproject.toml README.md LICENSE ./
COPY chordpub ./chordpub
COPY dht ./dht
COPY pubsub ./pubsub
COPY sim ./sim
COPY topologies ./topologies
COPY traces ./traces
RUN pip install --no-cache-dir . && useradd --create-home chordpub
USER chordpub

# the node's RPC port and its events, relay-in and relay-out ports (--ports); clients: --ports 5560
EXPOSE 5555-5558 5560-5561 50051
ENTRYPOINT ["chordpub"]
CMD ["node", "start", "--bind", "0.0.0.0", "--port", "5555", "--ports", "5556"]
