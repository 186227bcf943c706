"""A bounded schemathesis run against the server's OpenAPI schema (every operation,
generated valid and invalid requests, with the token): no server error (5xx), every
status and body as the schema documents them. Bounded: at most 10 cases per operation
and phase, 75 s in all."""


import pytest
from helpers.processes import run_python
from helpers.server import make_index

pytest.importorskip("schemathesis")

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def test_schemathesis_finds_no_server_error_and_no_schema_violation(photos, tmp_path, make_server):
    index = make_index(tmp_path / "idx", photos, n=4)
    srv = make_server(index, args=["--workers", "1", "--max-upload", "1"])
    out = run_python("-c", "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())",
                     "run", f"{srv.url}/openapi.json", "--checks", CHECKS, "--max-examples", "10",
                     "--max-time", "75", "--seed", "0", "--workers", "1", "--generation-database", "none",
                     "--request-timeout", "60", "--no-color", "--suppress-health-check", "all",
                     "--output-truncate", "true", "-H", f"Authorization: Bearer {srv.token}",
                     cwd=tmp_path, timeout=150)
    tail = (out.stdout + out.stderr)[-6000:]
    assert out.returncode == 0, tail
    assert "generated" in tail and "failure" not in tail.split("SUMMARY")[-1].replace("0 failures", ""), tail
    assert "Traceback" not in srv.log(), srv.log()[-4000:]
