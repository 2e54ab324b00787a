"""The Prometheus client against a hostile server on loopback (issue 22, item 9).

Every misbehaviour the red team found — a broken protocol, a lying answer, a stall, an endless body — must end in
one clear error line naming the query (or a named degradation where the rest of the answer is usable), within the
query's deadline, with bounded memory, never a traceback or a silent number.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hostile_http import (
    HostileServer,
    answer,
    endless,
    matrix,
    raw,
    sequence,
    slow,
    stall,
    success,
    trickle,
    vector,
)

from flopwatch.telemetry.prom_client import PrometheusClient, PrometheusError

T = 1_700_000_000.0  # the evaluation time every instant query asks for
GOOD = vector(({"UUID": "GPU-1"}, T, "2.5"))


def _refused(case, *, fragment: str, timeout_s: float = 2.0, call=None, **kw) -> tuple[str, float]:
    """Run ``call`` (default: an instant query of 'up' at T) against ``case``: it must raise PrometheusError with
    ``fragment`` in a one-line message naming the query, within the deadline (plus slack for a loaded machine)."""
    with HostileServer(case) as srv:
        c = PrometheusClient(srv.url, timeout_s=timeout_s, retries=kw.pop("retries", 0), **kw)
        t0 = time.monotonic()
        with pytest.raises(PrometheusError) as e:
            (call or (lambda c: c.query("up", T)))(c)
        took = time.monotonic() - t0
    msg = str(e.value)
    assert fragment in msg, msg
    assert "\n" not in msg and "Traceback" not in msg and len(msg) < 600, msg
    assert took < timeout_s + 1.5, took
    return msg, took


def _ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n" + body


GOOD_BYTES = json.dumps(GOOD).encode()

PROTOCOL = {
    "bad status code": (raw(b"HTTP/1.1 2x0 OK\r\n\r\n"), "malformed HTTP answer"),
    "not HTTP at all": (raw(b"SSH-2.0-OpenSSH_9.2\r\n\r\n"), "malformed HTTP answer"),
    "HTTP/0.9 (body, no status line)": (raw(GOOD_BYTES), "malformed HTTP answer"),
    "closed without answering": (raw(b""), "cannot reach Prometheus"),
    "truncated body (Content-Length)": (answer(GOOD, length=len(GOOD_BYTES) + 500), "truncated"),
    "truncated body (no length)": (raw(_ok(b"\r\n" + GOOD_BYTES[:40])), "not JSON"),
    "bad chunk size": (
        raw(_ok(b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + GOOD_BYTES + b"\r\n0\r\n\r\n")),
        "badly chunked",
    ),
    "chunked body cut short": (
        raw(_ok(b"Transfer-Encoding: chunked\r\n\r\n400\r\n" + GOOD_BYTES[:30])),
        "badly chunked",
    ),
    "200 headers": (answer(GOOD, headers=tuple(f"X-H{i}: v" for i in range(200))), "malformed HTTP answer"),
    "a 70 KB header line": (answer(GOOD, headers=("X-Long: " + "a" * 70000,)), "malformed HTTP answer"),
    "600 MiB declared": (answer(GOOD, length=600 * 2**20), "byte cap"),
    "redirect": (
        answer("", status="302 Found", headers=("Location: http://elsewhere/",)),
        "redirects are not",
    ),
    "HTTP 500, no retries left": (answer("oops", status="500 Internal Server Error"), "HTTP 500"),
    "HTTP 400 with the API's error": (
        answer(
            {"status": "error", "errorType": "bad_data", "error": "parse\nerror\x1b[31m"}, status="400 Bad"
        ),
        "bad_data: parse\\nerror\\x1b[31m",
    ),
    "HTML": (answer("<html>proxy login</html>"), "not JSON"),
    "empty 200": (answer(""), "empty answer"),
}

JSON_LIES = {
    "200,000-deep JSON": ("[" * 200_000 + "]" * 200_000, "nested too deep"),
    "bare NaN value": (
        '{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000,NaN]}]}}',
        "bare NaN",
    ),
    "bare NaN timestamp": (
        '{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[NaN,"1"]}]}}',
        "bare NaN",
    ),
    "bare Infinity": ('{"status":"success","data":Infinity}', "bare Infinity"),
    "a list, not an envelope": ("[1, 2]", "not a Prometheus API envelope"),
    "status error in a 200": (
        {"status": "error", "errorType": "timeout", "error": "query timed out"},
        "timeout",
    ),
    "no data": ({"status": "success"}, "no 'data'"),
    "warnings not strings": (success({"resultType": "vector", "result": []}, warnings=[1]), "'warnings'"),
    "integer value": (vector(({}, T, 5)), "not a string of a number"),
    "null value": (vector(({}, T, None)), "not a string of a number"),
    "true value": (vector(({}, T, True)), "not a string of a number"),
    '"+Inf" value': (vector(({}, T, "+Inf")), "not a finite decimal"),
    '"-Inf" value': (vector(({}, T, "-Inf")), "not a finite decimal"),
    '"-1e309" value': (vector(({}, T, "-1e309")), "out of a float's range"),
    '"abc" value': (vector(({}, T, "abc")), "not a finite decimal"),
    '"1_000" value': (vector(({}, T, "1_000")), "not a finite decimal"),
    '" 1" value': (vector(({}, T, " 1")), "not a finite decimal"),
    "scalar where a vector was asked": (
        success({"resultType": "scalar", "result": [T, "1"]}),
        '"scalar" where',
    ),
    "matrix where a vector was asked": (matrix(({}, [[T, "1"]])), '"matrix" where'),
    "no result type": (success({"result": []}), "null where"),
    "result not a list": (success({"resultType": "vector", "result": {}}), "not a list"),
    "timestamp as a string": (vector(({}, str(T), "1")), 'timestamp "1700000000.0" is not a number'),
    "timestamp 1e300": (vector(({}, 1e300, "1")), "outside the asked range"),
    "timestamp an hour off": (vector(({}, T + 3600, "1")), "outside the asked range"),
    "timestamp a 400-digit integer": (
        '{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":['
        + "9" * 400
        + ',"1"]}]}}',
        "range",
    ),
    "a label that is a number": (vector(({"gpu": 0}, T, "1")), "not a map of strings"),
    "labels as a list": (vector((["gpu"], T, "1")), "not a map of strings"),  # type: ignore[arg-type]
    "a three-element sample": (
        success({"resultType": "vector", "result": [{"metric": {}, "value": [T, "1", "2"]}]}),
        "[time, value] pair",
    ),
    "duplicated series": (
        vector(({"UUID": "GPU-1"}, T, "1"), ({"UUID": "GPU-1"}, T, "2")),
        "appears twice",
    ),
}


@pytest.mark.parametrize("name", list(PROTOCOL))
def test_protocol_breakage_is_one_line(name: str) -> None:
    case, fragment = PROTOCOL[name]
    msg, _ = _refused(case, fragment=fragment)
    assert "'up'" in msg  # names the query


@pytest.mark.parametrize("name", list(JSON_LIES))
def test_lying_answer_is_refused(name: str) -> None:
    body, fragment = JSON_LIES[name]
    msg, _ = _refused(answer(body), fragment=fragment)
    assert "/api/v1/query 'up'" in msg


def test_lies_in_range_answers_are_refused() -> None:
    def rng(c):
        return c.query_range("energy", T, T + 60, 15)

    backwards = matrix(({"UUID": "a"}, [[T, "1"], [T + 30, "2"], [T + 15, "3"]]))
    _refused(answer(backwards), fragment="repeat or go backwards", call=rng)
    repeated = matrix(({"UUID": "a"}, [[T, "1"], [T, "1"]]))
    _refused(answer(repeated), fragment="repeat or go backwards", call=rng)
    outside = matrix(({"UUID": "a"}, [[T, "1"]]), ({"UUID": "b"}, [[T + 600, "1"]]))
    _refused(answer(outside), fragment="outside the asked range", call=rng)
    _refused(answer(vector(({}, T, "1"))), fragment='"vector" where a matrix', call=rng)
    _refused(answer(matrix(({"UUID": "a"}, [[T, "1e999"]]))), fragment="float's range", call=rng)
    _refused(
        answer(success({"resultType": "matrix", "result": [{"metric": {}}]})), fragment="without", call=rng
    )
    # a raw-sample query's points lie inside its range selector
    _refused(
        answer(matrix(({"UUID": "a"}, [[T - 7200, "1"]]))),
        fragment="outside the asked range",
        call=lambda c: c.query_matrix("x[30m]", T),
    )


def test_label_values_must_be_distinct_strings() -> None:
    def lv(c):
        return c.label_values("UUID", "up", T - 60, T)

    _refused(answer(success(["a", 1])), fragment="not a list of strings", call=lv)
    _refused(answer(success({"a": "b"})), fragment="not a list of strings", call=lv)
    _refused(answer(success(["a", "a"])), fragment="listed twice", call=lv)


def test_nan_is_a_named_degradation_and_the_rest_is_kept() -> None:
    body = vector(
        ({"UUID": "GPU-1"}, T, "2.5"), ({"UUID": "GPU-2"}, T, "NaN"), ({"UUID": "GPU-3"}, T, "-1e3")
    )
    rng = matrix(
        ({"UUID": "GPU-1"}, [[T, "1"], [T + 15, "NaN"], [T + 30, "3"]]),
        ({"UUID": "GPU-2"}, [[T, "NaN"]]),
        ({"UUID": "GPU-3"}, [[T + 15, "4"]]),
    )
    warned = success({"resultType": "vector", "result": []}, warnings=["query hit a partial\nresponse"])
    with HostileServer(sequence(answer(body), answer(body), answer(rng), answer(warned))) as srv:
        c = PrometheusClient(srv.url, retries=0)
        a = c.query("energy", T)
        assert [x.labels["UUID"] for x in a] == ["GPU-1", "GPU-3"]
        assert [x.v.tolist() for x in a] == [[2.5], [-1000.0]]
        (note,) = a.degradations
        assert "'energy'" in note and "1 of 3 series" in note and "NaN" in note
        s = c.query("energy", T)
        assert [x.labels["UUID"] for x in s] == ["GPU-1", "GPU-3"] and len(s.degradations) == 1
        m = c.query_range("energy", T, T + 30, 15)
        assert [x.labels["UUID"] for x in m] == ["GPU-1", "GPU-3"]
        assert m[0].t.tolist() == [T, T + 30] and m[0].v.tolist() == [1.0, 3.0]
        assert "2 sample(s) with the value NaN" in m.degradations[0] and "in 2 series" in m.degradations[0]
        w = c.query("x", T)
        assert "server warning: query hit a partial\\nresponse" in w.degradations[0]
        # the run keeps them all, for the caller's notes
        assert len(c.degradations) == 4


@pytest.mark.parametrize(
    "name",
    ["never answers", "trickles its headers", "trickles its body", "trickles a chunked body"],
)
def test_slow_server_meets_the_query_deadline(name: str) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    case = {
        "never answers": stall,
        # one byte every 50 ms: each socket read succeeds, only a total deadline ends it
        "trickles its headers": trickle(head + b"X-Slow: ", b"a", 0.05),
        "trickles its body": trickle(head + b"Content-Length: 100000\r\n\r\n" + GOOD_BYTES[:10], b" ", 0.05),
        "trickles a chunked body": trickle(head + b"Transfer-Encoding: chunked\r\n\r\n", b"1\r\n \r\n", 0.05),
    }[name]
    msg, took = _refused(case, fragment="no complete answer within the 1 s deadline per query", timeout_s=1.0)
    assert took >= 0.9


def test_deadline_covers_retries() -> None:
    """A server that answers 503 forever: back-off and retries stop at the query's deadline, naming the last
    error, instead of 100 retries of exponential back-off."""
    msg, took = _refused(
        answer("busy", status="503 Service Unavailable"), fragment="HTTP 503", timeout_s=1.5, retries=100
    )
    assert "deadline" in msg


def test_retries_recover_from_a_dropped_connection() -> None:
    with HostileServer(sequence(raw(b""), answer("x", status="503 Busy"), answer(GOOD))) as srv:
        waits: list[float] = []
        c = PrometheusClient(srv.url, retries=2, sleep=waits.append)
        (got,) = c.query("up", T)
        assert got.v.tolist() == [2.5] and waits == [0.5, 1.0] and c.n_requests == 3


def test_run_deadline_spans_queries() -> None:
    with HostileServer(slow(answer(GOOD), 0.4)) as srv:
        c = PrometheusClient(srv.url, timeout_s=10, run_timeout_s=1.0, retries=0)
        t0 = time.monotonic()
        c.query("up", T)
        c.query("up", T)
        with pytest.raises(PrometheusError, match="the run's deadline of 1 s"):
            c.query("up", T)
        assert time.monotonic() - t0 < 2.5


def test_endless_body_refused_at_the_cap() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
    msg, _ = _refused(
        endless(head, 600 * 2**20), fragment="larger than the 1048576 byte cap", max_answer_bytes=2**20
    )
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    piece = b"100000\r\n" + b" " * 0x100000 + b"\r\n"
    _refused(endless(chunked, 600 * 2**20, piece), fragment="byte cap", max_answer_bytes=2**20)


_RSS_PROBE = textwrap.dedent(
    """
    import resource, sys
    from flopwatch.telemetry.prom_client import PrometheusClient, PrometheusError
    c = PrometheusClient(sys.argv[1], timeout_s=60, retries=0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        c.query_range("up", 1700000000, 1700003600, 15)
    except PrometheusError as e:
        print(str(e), file=sys.stderr)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((after - before) / 1024)
    """
)


def _rss_growth_mb(case) -> tuple[float, str]:
    """Peak RSS growth (MB) of a fresh process making one query against ``case``, and its error line."""
    with HostileServer(case) as srv:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
        r = subprocess.run(
            [sys.executable, "-c", _RSS_PROBE, srv.url], capture_output=True, text=True, timeout=120, env=env
        )
    assert r.returncode == 0, r.stderr
    return float(r.stdout.strip()), r.stderr


def test_600_mib_endless_body_in_bounded_memory() -> None:
    """The red team's 600 MiB answer took 2.3 GB: with the default cap (32 MiB) the peak RSS grows < 100 MB."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
    growth_mb, err = _rss_growth_mb(endless(head, 600 * 2**20))
    assert "larger than the 33554432 byte cap" in err
    assert growth_mb < 100, growth_mb


def test_worst_answer_under_the_cap_in_bounded_memory() -> None:
    """The costliest answer the cap lets through (≈ 2 M one-character samples in 32 MiB: JSON objects cost ~8 × the
    text) is parsed and checked in < 500 MB (the fleet target is ≤ 1 GiB), then refused for its repeated times."""
    n = (32 * 2**20 - 200) // 17
    body = (
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":['
        + b",".join([b'[1700000000,"1"]'] * n)
        + b"]}]}}"
    )
    assert len(body) <= 32 * 2**20
    growth_mb, err = _rss_growth_mb(answer(body))
    del body
    assert "repeat or go backwards" in err, err
    assert growth_mb < 500, growth_mb


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://[::1", "malformed URL"),
        ("http://prom:99999", "malformed URL"),
        ("http://prom:port", "malformed URL"),
        ("http://prom:0", "port 0"),
        ("ftp://prom:21", "not an http(s) URL"),
        ("http://", "not an http(s) URL"),
        ("http://pr om:9090", "spaces or control characters"),
        ("http://prom:9090/\x00", "spaces or control characters"),
        ("http://prom:9090/?query=up", "no query or fragment"),
        ("", "empty Prometheus URL"),
    ],
)
def test_malformed_urls_are_one_line(url: str, fragment: str) -> None:
    from flopwatch.errors import InputError

    with pytest.raises(InputError) as e:
        PrometheusClient(url)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_credentials_become_basic_auth_and_are_never_shown() -> None:
    with HostileServer(answer("no", status="401 Unauthorized")) as srv:
        url = srv.url.replace("http://", "http://alice:s3cret@")
        c = PrometheusClient(url, retries=0)
        with pytest.raises(PrometheusError) as e:
            c.query("up", T)
        assert "s3cret" not in str(e.value) and "HTTP 401" in str(e.value)
        assert b"Authorization: Basic YWxpY2U6czNjcmV0" in srv.requests[0]


def _fleet(url: str, *extra: str) -> list[str]:
    return ["fleet", "estimate", "--prometheus", url, "--start", "1700000000", "--end", "1700003600", *extra]


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        (raw(b"HTTP/1.1 2x0 OK\r\n\r\n"), "malformed HTTP answer"),
        (answer("[" * 200_000 + "]" * 200_000), "nested too deep"),
        (stall, "no complete answer within the 1 s deadline"),
    ],
)
def test_cli_fleet_estimate_is_one_line_exit_2(capsys, case, fragment) -> None:
    from flopwatch.cli import main

    with HostileServer(case) as srv:
        t0 = time.monotonic()
        rc = main(_fleet(srv.url, "--timeout", "1", "--retries", "0"))
        took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and fragment in err and "Traceback" not in err, err
    assert took < 3.0


def test_cli_fleet_estimate_run_deadline(capsys) -> None:
    """Each answer arrives within the query deadline, but a run of them cannot outlast --run-timeout."""
    from flopwatch.cli import main

    names = answer(success(["DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]))
    uuids = answer(success(["GPU-1"]))
    empty = answer(success({"resultType": "vector", "result": []}))

    def route(c, req: bytes) -> None:  # plausible answers, each 0.3 s late
        if c.wait(0.3):
            (names if b"/label/__name__/" in req else uuids if b"/label/" in req else empty)(c, req)

    with HostileServer(route) as srv:
        t0 = time.monotonic()
        rc = main(_fleet(srv.url, "--timeout", "5", "--run-timeout", "0.5", "--retries", "0"))
        took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "the run's deadline of 0.5 s" in err, err
    assert took < 2.5


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--threshold", "inf"),
        ("--threshold", "1e400"),
        ("--threshold", "nan"),
        ("--threshold", "-1e25"),
        ("--timeout", "0"),
        ("--timeout", "-1"),
        ("--timeout", "nan"),
        ("--timeout", "inf"),
        ("--run-timeout", "0"),
        ("--run-timeout", "nan"),
    ],
)
def test_cli_fleet_estimate_numeric_options(capsys, option: str, value: str) -> None:
    """Checked as ``estimate`` checks them, before any request (nothing listens at the URL)."""
    from flopwatch.cli import main

    rc = main(_fleet("http://127.0.0.1:9", option, value))
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and option.lstrip("-") in err, err
    assert "cannot reach" not in err


@pytest.mark.parametrize(
    ("fn", "value"),
    [
        ("time", "0001-01-01T00:00:00+01:00"),
        ("time", "9999-12-31T23:59:59-01:00"),
        ("time", "1e15"),
        ("time", "nan"),
        ("time", "-1"),
        ("duration", "100000y"),
        ("duration", "1e300"),
        ("duration", "0s"),
        ("duration", "nan"),
    ],
)
def test_times_and_durations_out_of_range_are_refused(fn: str, value: str) -> None:
    from flopwatch.errors import InputError
    from flopwatch.telemetry.timespec import parse_duration, parse_time

    with pytest.raises(InputError) as e:
        (parse_time if fn == "time" else parse_duration)(value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "spec", ["prometheus:http://[::1", "prometheus:http://prom:99999", "prometheus:http://a b"]
)
def test_record_with_a_malformed_prometheus_url_is_one_line(capsys, tmp_path, spec: str) -> None:
    from flopwatch.cli import main

    rc = main(
        ["record", "--sensor", spec, "--rate", "1", "--duration", "1", "-o", str(tmp_path / "t.parquet")]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 (cryptography), and its key."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    crt, pem = tmp_path / "c.pem", tmp_path / "k.pem"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return crt, pem


def test_https_verifies_the_certificate(tmp_path, monkeypatch) -> None:
    import ssl

    crt, pem = _self_signed(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, pem)
    with HostileServer(answer(GOOD), tls=ctx) as srv:
        assert srv.url.startswith("https://")
        # an untrusted certificate: refused, one line, never read
        with pytest.raises(PrometheusError, match="TLS failed.*CERTIFICATE_VERIFY_FAILED") as e:
            PrometheusClient(srv.url, retries=0).query("up", T)
        assert "\n" not in str(e.value)
        # trusted through the standard variable (the operator's CA bundle): read as over HTTP
        monkeypatch.setenv("SSL_CERT_FILE", str(crt))
        (got,) = PrometheusClient(srv.url, retries=0).query("up", T)
        assert got.v.tolist() == [2.5]
