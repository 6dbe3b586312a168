"""The admin API's OpenAPI document (src/quasar/broker/admin/openapi.json) stays in step with the router.

Every route the broker's admin application serves (method + path template, as ``broker/app.py`` composes it)
is an operation of the document, and every operation of the document is routed; the checked-in file is what
``scripts/gen_openapi.py`` writes; the broker serves that file at ``GET /admin/v2/openapi.json``.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import aiohttp
import pytest
import schemathesis

from quasar.broker.admin.openapi_route import OPENAPI_PATH, openapi_document
from quasar.broker.app import BrokerApp
from quasar.broker.config import BrokerConfig

ROOT = Path(__file__).resolve().parents[2]
SPEC_FILE = ROOT / "src" / "quasar" / "broker" / "admin" / "openapi.json"
GENERATOR = ROOT / "scripts" / "gen_openapi.py"
HOW_TO_FIX = "describe it in OPERATIONS of scripts/gen_openapi.py and run `python scripts/gen_openapi.py`"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_openapi", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spec_operations(document: dict) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in document["paths"].items() for method in item}


def _routed_operations(app: BrokerApp) -> set[tuple[str, str]]:
    """(method, canonical path template) of every admin route; the HEAD twin aiohttp adds to a GET is left
    out (HTTP gives every GET a HEAD)."""
    assert app._admin_runner is not None
    routes = {(route.method, route.resource.canonical) for route in app._admin_runner.app.router.routes()
              if route.resource is not None}  # fmt: skip
    return {(method, path) for method, path in routes if not (method == "HEAD" and ("GET", path) in routes)}


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[BrokerApp]:
    app = BrokerApp(
        BrokerConfig(
            host="127.0.0.1", port=0, admin_port=0, data_dir=tmp_path / "data", rocketmq_enabled=False
        )
    )
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


async def test_every_route_is_in_the_document_and_every_operation_is_routed(broker: BrokerApp) -> None:
    document = json.loads(SPEC_FILE.read_text(encoding="utf-8"))
    routed, described = _routed_operations(broker), _spec_operations(document)
    problems = [
        f"{m} {p} is routed but not in {SPEC_FILE.name}: {HOW_TO_FIX}" for m, p in sorted(routed - described)
    ]
    problems += [
        f"{m} {p} is in {SPEC_FILE.name} but not routed by the broker" for m, p in sorted(described - routed)
    ]
    assert not problems, "\n".join(problems)
    assert len(routed) > 90  # the whole admin API was collected, not an empty router


async def test_the_broker_serves_the_checked_in_document(broker: BrokerApp) -> None:
    url = f"http://127.0.0.1:{broker.admin_port}{OPENAPI_PATH}"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200
        assert response.content_type == "application/json"
        served = await response.read()
    assert served == SPEC_FILE.read_bytes() == openapi_document()
    assert json.loads(served)["openapi"].startswith("3.1")


def test_the_checked_in_document_is_what_the_generator_writes() -> None:
    assert SPEC_FILE.read_text(encoding="utf-8") == _generator().render(), (
        f"{SPEC_FILE} is stale: run `python scripts/gen_openapi.py`"
    )


def test_the_document_is_valid_openapi_with_unique_operation_ids_and_json_errors() -> None:
    document = json.loads(SPEC_FILE.read_text(encoding="utf-8"))
    schema = schemathesis.openapi.from_dict(document)  # validates against the OpenAPI 3.1 meta-schema
    operations = [op.ok() for op in schema.get_all_operations()]
    assert len(operations) == len(_spec_operations(document))
    ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))
    for path, item in document["paths"].items():
        for method, op in item.items():
            statuses = set(op["responses"])
            assert any(s.startswith(("2", "3")) for s in statuses), (
                f"{method} {path} documents no success answer"
            )
            for status, answer in op["responses"].items():
                if status.startswith(("4", "5")):  # Pulsar's {"reason": ...} for every error
                    assert answer == {"$ref": f"#/components/responses/E{status}"}, (method, path, status)


def test_the_generator_check_mode_reports_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generator = _generator()
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n", encoding="utf-8")
    monkeypatch.setattr(generator, "OUTPUT", stale)
    assert generator.main(["--check"]) == 1
    assert generator.main([]) == 0
    assert generator.main(["--check"]) == 0
    assert stale.read_text(encoding="utf-8") == SPEC_FILE.read_text(encoding="utf-8")
