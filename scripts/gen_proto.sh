#!/bin/sh
# Regenerate src/quasar/protocol/proto/PulsarApi_pb2.py (+ .pyi) from PulsarApi.proto.
# Called by `make proto`; run from anywhere. The generated files are checked in.
#
# The .py comes from grpcio-tools' protoc; the .pyi from mypy-protobuf's protoc-gen-mypy plugin (dev extras),
# whose stubs pass `mypy --strict` with types-protobuf: enum fields are typed as each enum's ValueType and
# HasField/ClearField take the literal field names. (protoc's own --pyi_out stub does not: it leaves generic
# types bare and writes Schema.Type's member `None` as an attribute, a syntax error.) mypy-protobuf leaves that
# member out of the stub; at run time it stays reachable as Schema.Type.Value("None").
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-"$ROOT/.venv/bin/python"}
BIN_DIR=$(dirname "$PY")
PROTO_DIR="$ROOT/src/quasar/protocol/proto"

"$PY" -m grpc_tools.protoc -I "$PROTO_DIR" \
    --plugin=protoc-gen-mypy="$BIN_DIR/protoc-gen-mypy" \
    --python_out="$PROTO_DIR" --mypy_out=quiet:"$PROTO_DIR" \
    "$PROTO_DIR/PulsarApi.proto"

# The generated module must import with the protobuf runtime installed in the venv (the gencode embeds the
# protoc version and refuses a runtime older than it), and the stub must be valid Python.
"$PY" -c "import quasar.protocol.proto.PulsarApi_pb2 as m; m.BaseCommand(type=m.BaseCommand.PING, ping={})"
"$PY" -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" "$PROTO_DIR/PulsarApi_pb2.pyi"
echo "generated $PROTO_DIR/PulsarApi_pb2.py and .pyi"
