"""The generic layer lifted (issue 47): settings in any generic form, events on info lines, levels of glog /
GStreamer / Python logging lines and of status codes, evidence cut at sensible places. The snippets are written
here in those libraries' formats (no tool's log of tests/data/logcorpus/e/ is copied: e/ measures this layer)."""

from __future__ import annotations

from trtverify.buildlog import events, settings
from trtverify.buildlog.context import scan
from trtverify.buildlog.evidence import cut
from trtverify.buildlog.lines import split_records
from trtverify.buildlog.parser import parse
from trtverify.buildlog.prefixes import split


def _settings(text: str) -> dict[str, str]:
    return {i.detail["key"]: i.value for i in scan(text).settings}


def test_settings_in_every_generic_form():
    text = "\n".join(
        [
            "$ ./serve --model-store /srv/models --workers=4 -p 8000 --verbose",
            "[2026-01-02 10:00:00] runner INFO Number of blocks in the page pool: 4711, block size=64",
            "Set attention_kernel to fused.",
            "| page_pool_bytes | 1073741824 |",
            "+-----------------+------------+",
            'backend config: {"max-queue":"16","strict":true}',
            "reserved memory for the page pool (905216)",
            "input dims: [8, 3, 224, 224], layout: NCHW",
            "see https://example.org/docs for more",
        ]
    )
    got = _settings(text)
    assert got["--model-store"] == "/srv/models"
    assert got["--workers"] == "4"
    assert got["-p"] == "8000"
    assert "--verbose" not in got  # a switch without a value
    assert got["blocks in the page pool"] == "4711"
    assert got["block size"] == "64"
    assert got["attention_kernel"] == "fused"
    assert got["page_pool_bytes"] == "1073741824"
    assert got["max-queue"] == '"16"' and got["strict"] == "true"
    assert got["reserved memory for the page pool"] == "905216"
    assert got["input dims"] == "[8, 3, 224, 224]"  # a bracketed value is kept whole
    assert got["layout"] == "NCHW"
    assert not any(v.startswith("//") for v in got.values())  # a URL is not a setting
    assert scan(text).settings[0].line == 1


def test_a_table_header_and_a_bracketed_tag_are_not_keys():
    table = "+------+-------+\n| Name | Value |\n+------+-------+\n| pool | 64    |\n+------+-------+"
    assert _settings(table) == {"pool": "64"}
    assert _settings("[I] [MemTag] pool in use: 12") == {"pool in use": "12"}


def test_settings_are_bounded_and_a_trace_is_not_a_setting():
    trace = "\n".join(f"[I] Importing initializer: weight_{i}" for i in range(500))
    many = "\n".join(f"[I] option_{chr(97 + i // 26)}{chr(97 + i % 26)}: {i}" for i in range(200))
    ctx = scan(trace + "\n" + many)
    keys = [i.detail["key"] for i in ctx.settings]
    assert "Importing initializer" not in keys  # one key, 500 values: a trace
    assert len(ctx.settings) == settings.SETTINGS
    assert ctx.left_out["settings"] == 200 - settings.SETTINGS + 500  # what was left out is counted
    verbose = "[V] [TRT] Tactic name: sm80_xmma_gemm\n[I] workspace: 512 MiB"
    assert _settings(verbose) == {"workspace": "512 MiB"}  # a builder's verbose trace is not its settings


def test_prefix_levels():
    assert split("I0102 03:04:05.678901 42 server.cc:12] loading: resnet:1") == ("info", "loading: resnet:1")
    assert split("* E0102 03:04:05.678901 42 loader.cc:77] load failed")[0] == "error"
    assert split('W0102 03:04:05.678901 42 x.cc:1] "quoted whole message"') == ("warning", "quoted whole message")
    gst = "0:00:01.250000000  4242 0x55d0c0a0 WARN   myfilter gstmyfilter.c:321:my_func:<filter0> it went wrong"
    assert split(gst) == ("warning", "it went wrong")
    assert split("2026-01-02 10:00:00,123 - mytool - ERROR - conversion of a.onnx failed.")[0] == "error"
    assert split("WARNING 2026-01-02 10:00:00.123 plugin.py:25] numpy not found") == ("warning", "numpy not found")
    assert split("plain text line") == (None, "plain text line")


def _kinds(text: str, rules: bool = True) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in parse(text, rules=rules).findings:
        out.setdefault(f.kind, []).append(f)
    return out


def test_floor_reads_generic_levels_and_status_codes():
    long_msg = "x" * 190  # a line of 200+ characters must not swallow the next GStreamer line as its wrap
    text = "\n".join(
        [
            f"0:00:01.250000000  4242 0x55d0c0a0 WARN   myfilter gstmyfilter.c:321:my_func:<filter0> {long_msg} a",
            "0:00:01.260000000  4242 0x55d0c0a0 ERROR  myfilter gstmyfilter.c:400:my_init:<filter0> open failed",
            "* E0102 03:04:05.678901 42 loader.cc:77] unable to create the session",
            "RunFail: [SomeRuntimeError] : 6 : RUNTIME_EXCEPTION : kernel launch failed",
            "MODEL_FAIL : cannot read weights",
            "Failed to build the network on detector.cfg",
            "Unable to import the optional quantizer; continuing",
        ]
    )
    found = _kinds(text)
    assert [f.lines for f in found["log_warning"]] == [(1,)]
    errors = {f.lines[0]: f for f in found["log_error"]}
    assert sorted(errors) == [2, 3, 4, 5, 6]
    assert errors[2].message == "open failed"  # the message without its GStreamer prefix
    assert "detector.cfg" in errors[6].message
    assert 7 not in errors  # a notice a tool carries on after is not an error


def test_events_on_info_lines_grouped_with_their_names():
    text = "\n".join(
        [
            "I0102 03:04:05.000001 42 lifecycle.cc:1] successfully loaded 'resnet_a'",
            "I0102 03:04:05.000002 42 instance.cc:2] Created instance resnet_a_0 on GPU 0 with profile p[0];",
            "I0102 03:04:05.000003 42 lifecycle.cc:1] successfully loaded 'resnet_b'",
            "Engine not found, generating. This may take a while",
            "[V] [TRT] Deserialized 12 weights of layer conv_7",  # verbose: not an event
            "all done, everything loaded",  # nothing named: not an event
        ]
    )
    # the generic layer alone: a family (Triton's) reads these lines where its rules are on, and events are only
    # what no rule read
    got = {f.lines[0]: f for f in _kinds(text, rules=False)["log_event"]}
    assert sorted(got) == [1, 2, 4]
    assert 4 in {f.lines[0] for f in _kinds(text).get("log_event", [])}  # no family claims the app's own line
    loaded = got[1]
    assert loaded.count == 2 and loaded.lines == (1, 3)
    assert loaded.layers == ("resnet_a", "resnet_b")
    assert loaded.detail["first_line"] == 1 and loaded.detail["last_line"] == 3
    assert "p[0];" in got[2].evidence[0].text
    assert got[2].severity == "info"


def test_events_are_bounded():
    text = "\n".join(
        f"[I] built the {chr(97 + i // 26)}{chr(97 + i % 26)}ish network" for i in range(60)
    )  # 60 templates
    hits, more = events.hits(split_records(text), set())
    assert len({h.key for h in hits}) == events.EVENTS == len(hits)
    assert more == 60 - events.EVENTS  # the lines past the bound are counted, not dropped silently
    assert parse(text).context.left_out["events"] == more


def test_cut_keeps_quoted_names_and_both_ends():
    line = "head " * 30 + "'a_quoted/name_that_matters' " + "mid " * 60 + "the end: engine failed, try again"
    out = cut(line)
    assert len(out) < len(line)
    assert out.endswith("the end: engine failed, try again")
    assert ("'a_quoted/name_that_matters'" in out) or ("a_quoted" not in out)  # whole or not at all
    assert cut("short line") == "short line"


def test_figure_with_its_unit_in_brackets():
    ctx = scan("[I] [MemUsageChange] allocation in context creation: CPU +0, GPU +11, now: CPU 0, GPU 53 (MiB)")
    assert "53 (MiB)" in [i.value for i in ctx.figures]
