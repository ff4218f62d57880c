"""Checks that Store::renderPrometheus() output is valid text exposition format 0.0.4.

Usage: prometheus_format_test.py <prometheus_dump binary>
"""
import re
import subprocess
import sys

from prometheus_client.parser import text_string_to_metric_families

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
SAMPLE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*\})? (-?[0-9]+(?:\.[0-9]+)?)\Z')
HISTOGRAM_SAMPLES = ("_bucket", "_sum", "_count")
WEIRD = 'we"ird\\name\n'
EXPECTED = {
    ("sluice_listener_downstream_cx_total", (("listener", "http"),)): ("counter", 12),
    ("sluice_listener_downstream_cx_total", (("listener", WEIRD),)): ("counter", 1),
    ("sluice_http1_rq_total", (("chain", "http"),)): ("counter", 42),
    ("sluice_http1_rs_total", (("chain", "http"), ("class", "2xx"))): ("counter", 7),
    ("sluice_http1_rs_total", (("chain", "http"), ("class", "5xx"))): ("counter", 0),
    ("sluice_auth_denied_total", ()): ("counter", 3),
    ("sluice_dns_cache_hits_total", ()): ("counter", 5),
    ("sluice_listener_downstream_cx_active", (("listener", "http"),)): ("gauge", -2),
    ("sluice_listener_downstream_cx_active", (("listener", "socks5"),)): ("gauge", 4),
    ("sluice_never_touched_total", ()): ("counter", 0),
    ("sluice_a_b_total", ()): ("counter", 1),
    ("sluice_a_b_2_total", ()): ("counter", 2),
}
# Histograms: cumulative buckets in seconds, le last among the labels, then _sum and _count.
REQUEST = (("listener", "http"), ("protocol", "http1"))
for le, n in (("0.0005", 1), ("0.25", 2), ("60", 3), ("+Inf", 4)):
    EXPECTED[("sluice_request_duration_seconds_bucket", REQUEST + (("le", le),))] = ("histogram", n)
    EXPECTED[("sluice_dns_lookup_duration_seconds_bucket", (("le", le),))] = ("histogram", 0)
EXPECTED[("sluice_request_duration_seconds_sum", REQUEST)] = ("histogram", 62.7501)
EXPECTED[("sluice_request_duration_seconds_count", REQUEST)] = ("histogram", 4)
EXPECTED[("sluice_dns_lookup_duration_seconds_sum", ())] = ("histogram", 0)
EXPECTED[("sluice_dns_lookup_duration_seconds_count", ())] = ("histogram", 0)


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def unescape(value):
    return re.sub(r'\\(.)', lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value)


def check_lines(text):
    """Line-level rules the lenient client parser does not enforce: one HELP then one TYPE per
    family, right before its samples, no family twice."""
    if not text.endswith("\n"):
        fail("exposition does not end with a newline")
    helped = set()
    typed = {}
    current = None
    samples = {}
    for number, line in enumerate(text.split("\n")[:-1], 1):
        if line.startswith("# HELP "):
            parts = line.split(" ", 3)
            if len(parts) != 4 or not NAME.match(parts[2]) or not parts[3]:
                fail("line %d: bad HELP line %r" % (number, line))
            if parts[2] in helped:
                fail("line %d: second HELP for %s" % (number, parts[2]))
            helped.add(parts[2])
            current = parts[2]
        elif line.startswith("# TYPE "):
            parts = line.split(" ")
            if len(parts) != 4 or parts[2] != current or \
                    parts[3] not in ("counter", "gauge", "histogram"):
                fail("line %d: bad TYPE line %r (not right after its HELP)" % (number, line))
            if parts[2] in typed:
                fail("line %d: second TYPE for %s" % (number, parts[2]))
            typed[parts[2]] = parts[3]
        elif line.startswith("#"):
            fail("line %d: unexpected comment %r" % (number, line))
        else:
            m = SAMPLE.match(line)
            if not m:
                fail("line %d: bad sample line %r" % (number, line))
            name = m.group(1)
            suffixes = HISTOGRAM_SAMPLES if typed.get(current) == "histogram" else ("",)
            if current not in typed or name not in [current + x for x in suffixes]:
                fail("line %d: sample %s outside its family" % (number, name))
            labels = tuple((k, unescape(v)) for k, v in
                           re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                      m.group(2) or ""))
            if (name, labels) in samples:
                fail("line %d: duplicate sample %r" % (number, line))
            value = float(m.group(3)) if "." in m.group(3) else int(m.group(3))
            samples[(name, labels)] = (typed[current], value)
    return samples


def check_histograms(samples):
    """Each series: le ascending and last, +Inf last, counts cumulative, _count equal to +Inf."""
    series = {}
    for (name, labels), (kind, value) in samples.items():
        if kind != "histogram" or not name.endswith("_bucket"):
            continue
        if labels[-1][0] != "le":
            fail("%s%r: le is not the last label" % (name, labels))
        series.setdefault((name[:-len("_bucket")], labels[:-1]), []).append((labels[-1][1], value))
    for (family, labels), buckets in series.items():
        bounds = [float(le) for le, _ in buckets]
        counts = [n for _, n in buckets]
        if bounds != sorted(bounds) or buckets[-1][0] != "+Inf":
            fail("%s%r: buckets out of order: %r" % (family, labels, buckets))
        if counts != sorted(counts):
            fail("%s%r: buckets not cumulative: %r" % (family, labels, buckets))
        if samples.get((family + "_count", labels), (None, None))[1] != counts[-1]:
            fail("%s%r: _count is not the +Inf bucket" % (family, labels))
        if (family + "_sum", labels) not in samples:
            fail("%s%r: no _sum" % (family, labels))


def main():
    text = subprocess.run([sys.argv[1]], check=True, stdout=subprocess.PIPE).stdout.decode("utf-8")
    samples = check_lines(text)
    check_histograms(samples)
    if samples != EXPECTED:
        fail("samples differ:\n got %r\nwant %r" % (samples, EXPECTED))

    # The client parser keeps counters in OpenMetrics form: family "x" for a sample named
    # "x_total", so compare by sample name.
    parsed = {}
    for family in text_string_to_metric_families(text):
        for smp in family.samples:
            key = (smp.name, tuple(sorted(smp.labels.items())))
            if key in parsed:
                fail("client parser saw %r twice" % (key,))
            parsed[key] = (family.type, smp.value)
    want = {(name, tuple(sorted(labels))): (kind, float(value))
            for (name, labels), (kind, value) in EXPECTED.items()}
    if parsed != want:
        fail("client parser read:\n got %r\nwant %r" % (parsed, want))
    print("PASS: %d samples" % len(parsed))


if __name__ == "__main__":
    main()
