"""Tests for marlin_demo.subtitles: WebVTT and SRT output."""

from __future__ import annotations

import pytest

from marlin_demo.model_io import Event
from marlin_demo.subtitles import format_timestamp, to_srt, to_webvtt

EVENTS = [
    Event(0.0, 1.5, "The person holds a plush toy near the dog."),
    Event(1.5, 3.0, "The dog shakes."),
]


@pytest.mark.parametrize(
    ("seconds", "vtt", "srt"),
    [
        (0.0, "00:00:00.000", "00:00:00,000"),
        (1.5, "00:00:01.500", "00:00:01,500"),
        (61.25, "00:01:01.250", "00:01:01,250"),
        (3723.004, "01:02:03.004", "01:02:03,004"),
        (59.9996, "00:01:00.000", "00:01:00,000"),
        (-2.0, "00:00:00.000", "00:00:00,000"),
    ],
)
def test_format_timestamp(seconds: float, vtt: str, srt: str) -> None:
    assert format_timestamp(seconds) == vtt
    assert format_timestamp(seconds, ",") == srt


def test_webvtt_exact() -> None:
    assert to_webvtt(EVENTS) == (
        "WEBVTT\n"
        "\n"
        "00:00:00.000 --> 00:00:01.500\n"
        "The person holds a plush toy near the dog.\n"
        "\n"
        "00:00:01.500 --> 00:00:03.000\n"
        "The dog shakes.\n"
    )


def test_srt_exact() -> None:
    assert to_srt(EVENTS) == (
        "1\n"
        "00:00:00,000 --> 00:00:01,500\n"
        "The person holds a plush toy near the dog.\n"
        "\n"
        "2\n"
        "00:00:01,500 --> 00:00:03,000\n"
        "The dog shakes.\n"
    )


def test_accepts_dicts() -> None:
    dicts = [e.to_dict() for e in EVENTS]
    assert to_webvtt(dicts) == to_webvtt(EVENTS)
    assert to_srt(dicts) == to_srt(EVENTS)


def test_empty_inputs() -> None:
    assert to_webvtt([]) == "WEBVTT\n"
    assert to_srt([]) == ""


def test_skips_zero_length_reversed_and_empty_events_and_renumbers() -> None:
    events = [
        Event(1.0, 1.0, "zero length"),
        Event(3.0, 2.0, "reversed"),
        Event(4.0, 5.0, "   "),
        Event(1.0, 1.0004, "rounds to zero length"),
        Event(float("nan"), 2.0, "nan"),
        Event(6.0, 7.0, "kept"),
    ]
    assert to_srt(events) == "1\n00:00:06,000 --> 00:00:07,000\nkept\n"
    assert to_webvtt(events) == "WEBVTT\n\n00:00:06.000 --> 00:00:07.000\nkept\n"


def test_sorted_by_start_time() -> None:
    events = [Event(5.0, 6.0, "second"), Event(1.0, 2.0, "first")]
    srt = to_srt(events)
    assert srt.index("first") < srt.index("second")
    assert srt.startswith("1\n00:00:01,000 --> 00:00:02,000\nfirst\n\n2\n00:00:05,000")


def test_newlines_collapsed() -> None:
    srt = to_srt([Event(0.0, 1.0, "line one\n\nline two\r\n\tend")])
    assert srt == "1\n00:00:00,000 --> 00:00:01,000\nline one line two end\n"


def test_arrow_made_harmless() -> None:
    events = [Event(0.0, 1.0, "a --> b ---> c")]
    srt = to_srt(events)
    vtt = to_webvtt(events)
    # Only the timing line may contain the arrow.
    assert srt.count("-->") == 1
    assert vtt.count("-->") == 1
    assert "a \u2192 b \u2192 c" in srt


def test_webvtt_escapes_markup_but_srt_keeps_text() -> None:
    events = [Event(0.0, 1.0, "Tom & Jerry <b>run</b>")]
    assert to_webvtt(events).endswith("Tom &amp; Jerry &lt;b&gt;run&lt;/b&gt;\n")
    assert to_srt(events).endswith("Tom & Jerry <b>run</b>\n")


def test_negative_start_clamped_to_zero() -> None:
    assert to_srt([Event(-1.0, 2.0, "x")]) == "1\n00:00:00,000 --> 00:00:02,000\nx\n"


def test_non_latin_text_kept() -> None:
    assert "一只狗在跑 \U0001f436" in to_webvtt([Event(0.0, 1.0, "一只狗在跑 \U0001f436")])
