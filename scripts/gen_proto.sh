#!/bin/sh
# Regenerate src/quasar/protocol/proto/PulsarApi_pb2.py (+ .pyi) from PulsarApi.proto.
# Called by `make proto`; run from anywhere. The generated files are checked in.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-"$ROOT/.venv/bin/python"}
PROTO_DIR="$ROOT/src/quasar/protocol/proto"

"$PY" -m grpc_tools.protoc -I "$PROTO_DIR" --python_out="$PROTO_DIR" --pyi_out="$PROTO_DIR" \
    "$PROTO_DIR/PulsarApi.proto"

# Schema.Type has a member named `None` (as upstream). It is reachable at run time only as
# Schema.Type.Value("None"), but as an attribute it makes the stub a syntax error: drop those stub lines.
"$PY" - "$PROTO_DIR/PulsarApi_pb2.pyi" <<'PYEOF'
import ast, pathlib, re, sys
path = pathlib.Path(sys.argv[1])
text = re.sub(r"(?m)^ *None: .*\n", "", path.read_text())
ast.parse(text)
path.write_text(text)
PYEOF

# The generated module must import with the protobuf runtime installed in the venv (the gencode embeds the
# protoc version and refuses a runtime older than it).
"$PY" -c "import quasar.protocol.proto.PulsarApi_pb2 as m; m.BaseCommand(type=m.BaseCommand.PING, ping={})"
echo "generated $PROTO_DIR/PulsarApi_pb2.py and .pyi"
