"""Checks that Store::renderPrometheus() output is valid text exposition format 0.0.4.

Usage: prometheus_format_test.py <prometheus_dump binary>
"""
import re
import subprocess
import sys

from prometheus_client.parser import text_string_to_metric_families

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
EXPECTED = {
    "sluice_listener_http_downstream_cx_total": ("counter", 12),
    "sluice_http1_http_rq_total": ("counter", 42),
    "sluice_auth_denied": ("counter", 3),
    "sluice_dns_cache_hits": ("counter", 5),
    "sluice_worker_0_downstream_cx_active": ("gauge", -2),
    "sluice_worker_1_downstream_cx_active": ("gauge", 4),
    "sluice_never_touched": ("counter", 0),
    "sluice_a_b": ("counter", 1),
    "sluice_a_b_2": ("counter", 2),
}


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def check_lines(text):
    """Line-level rules the lenient client parser does not enforce."""
    if not text.endswith("\n"):
        fail("exposition does not end with a newline")
    typed = {}
    samples = {}
    for number, line in enumerate(text.split("\n")[:-1], 1):
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            if len(parts) != 4 or not NAME.match(parts[2]) or parts[3] not in ("counter", "gauge"):
                fail("line %d: bad TYPE line %r" % (number, line))
            if parts[2] in typed:
                fail("line %d: second TYPE for %s" % (number, parts[2]))
            typed[parts[2]] = parts[3]
        elif line.startswith("#"):
            fail("line %d: unexpected comment %r" % (number, line))
        else:
            parts = line.split(" ")
            if len(parts) != 2 or not NAME.match(parts[0]):
                fail("line %d: bad sample line %r" % (number, line))
            if parts[0] not in typed:
                fail("line %d: sample %s before its TYPE line" % (number, parts[0]))
            if parts[0] in samples:
                fail("line %d: duplicate sample %s" % (number, parts[0]))
            try:
                samples[parts[0]] = (typed[parts[0]], int(parts[1]))
            except ValueError:
                fail("line %d: value is not an integer: %r" % (number, line))
    return samples


def main():
    text = subprocess.run([sys.argv[1]], check=True, stdout=subprocess.PIPE).stdout.decode("utf-8")
    samples = check_lines(text)
    if samples != EXPECTED:
        fail("samples differ:\n got %r\nwant %r" % (samples, EXPECTED))

    # The client parser keeps counters in OpenMetrics form: family "x" for a sample named
    # "x_total" or "x", so compare families.
    parsed = {}
    for family in text_string_to_metric_families(text):
        if family.name in parsed or len(family.samples) != 1:
            fail("client parser saw family %s twice or with %d samples"
                 % (family.name, len(family.samples)))
        parsed[family.name] = (family.type, family.samples[0].value)
    want = {}
    for name, (kind, value) in EXPECTED.items():
        if kind == "counter" and name.endswith("_total"):
            name = name[:-len("_total")]
        want[name] = (kind, float(value))
    if parsed != want:
        fail("client parser read:\n got %r\nwant %r" % (parsed, want))
    print("PASS: %d metrics" % len(parsed))


if __name__ == "__main__":
    main()
