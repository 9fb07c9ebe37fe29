"""The served OpenAPI document passes openapi-spec-validator (installed by .ci/clients;
skipped where it is not installed) and has what generators need."""

from __future__ import annotations

import json
import urllib.request

import pytest


def served(url: str) -> dict:
    with urllib.request.urlopen(url + "/openapi.json", timeout=10) as r:
        return json.loads(r.read())


def test_served_document_validates(server) -> None:
    validator = pytest.importorskip("openapi_spec_validator")
    doc = served(server.url)
    validator.validate(doc)
    ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids)), ids
