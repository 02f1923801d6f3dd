"""The gRPC API's Python stubs, generated from proto/chordpub/v1/pubsub.proto by grpcio-tools and
checked in (the runtime needs no protoc; tests/unit/test_grpc_stubs.py regenerates them and fails if
they differ from the .proto's). Regenerate with:

    .venv/bin/python -m grpc_tools.protoc -I proto --python_out=. --grpc_python_out=. \\
        proto/chordpub/v1/pubsub.proto
"""
