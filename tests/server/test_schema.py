"""A bounded schemathesis run against the server's OpenAPI schema (every operation,
generated valid and invalid requests, with the token, hostile values mixed into the
bodies by schemathesis_hooks.py: deep JSON, huge numbers, vectors of huge values): no
server error (5xx), every status and body as the schema documents them. Bounded: the
default run at most 10 cases per operation and phase, 75 s in all; the slow one over
1,000 cases, 300 s at most."""

import re
from pathlib import Path

import pytest
from helpers.processes import run_python, subprocess_env
from helpers.server import make_index

pytest.importorskip("schemathesis")

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


HOOKS = Path(__file__).with_name("schemathesis_hooks.py")


def run_schemathesis(photos, tmp_path, make_server, max_examples, max_time):
    """The number of cases schemathesis generated; every check passed and the server
    logged no traceback."""
    index = make_index(tmp_path / "idx", photos, n=4)
    srv = make_server(index, args=["--workers", "1", "--max-upload", "1"])
    out = run_python("-c", "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())",
                     "run", f"{srv.url}/openapi.json", "--checks", CHECKS, "--max-examples", str(max_examples),
                     "--max-time", str(max_time), "--seed", "0", "--workers", "1", "--generation-database",
                     "none", "--request-timeout", "60", "--no-color", "--suppress-health-check", "all",
                     "--output-truncate", "true", "-H", f"Authorization: Bearer {srv.token}",
                     cwd=tmp_path, timeout=2 * max_time + 75, env=subprocess_env(SCHEMATHESIS_HOOKS=str(HOOKS)))
    tail = (out.stdout + out.stderr)[-6000:]
    assert out.returncode == 0, tail
    assert "generated" in tail and "failure" not in tail.split("SUMMARY")[-1].replace("0 failures", ""), tail
    assert "Traceback" not in srv.log(), srv.log()[-4000:]
    return sum(int(n.replace(",", "")) for n in re.findall(r"([\d,]+) generated", tail))


def test_schemathesis_finds_no_server_error_and_no_schema_violation(photos, tmp_path, make_server):
    assert run_schemathesis(photos, tmp_path, make_server, max_examples=10, max_time=75) > 0


@pytest.mark.slow
def test_schemathesis_over_a_thousand_hostile_cases(photos, tmp_path, make_server):
    assert run_schemathesis(photos, tmp_path, make_server, max_examples=150, max_time=300) >= 1000
