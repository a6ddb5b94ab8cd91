"""The suite's third task, written as a built-in one would be (it does not ship): a free-form question about
the clip, answered in a sentence with the span where it is seen. Its answer type, result, parser and repair
are its own; importing the module registers it, with its order, wording, examples and settings, as
``marlin_demo/tasks/caption.py`` registers caption (the ``question`` fixture imports it and takes it away)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from marlin_demo import metrics, model_io
from marlin_demo.model_io import SpanParse
from marlin_demo.results import Result, Window, span_json
from marlin_demo.settings import TaskSetting
from marlin_demo.tasks import Task, register_task
from marlin_demo.tasks.find import map_span
from marlin_demo.tasks.registry import Answer, Made, seconds, value

PROMPT = (
    "Answer this question about the video in one sentence after 'Answer:', then say when it is seen as "
    "'From X to Y.' in seconds. Question: {question}"
)
_ANSWER_RE = re.compile(r"^\s*Answer:\s*(?P<answer>.*?)\s*$", re.M)


@dataclass
class QuestionParse:
    """The answer's words and the span where it is seen (None: none could be read)."""

    answer: str
    span: tuple[float, float] | None
    format_ok: bool
    repaired: bool = False
    repairs: list[str] = field(default_factory=list)


def parse_question(text: str) -> QuestionParse:
    """``Answer: ...`` then ``From X to Y.``; without the ``Answer:`` line, the first line is the answer."""
    said, span = _ANSWER_RE.search(text), model_io.parse_span(text).span
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    answer = said.group("answer") if said else first
    return QuestionParse(answer, span, said is not None and span is not None)


def repair_question(parse: QuestionParse, duration: float | None) -> QuestionParse:
    """Its span repaired as find's is (kept inside the clip, in order)."""
    fixed = model_io.repair_span(SpanParse(parse.span, parse.format_ok), duration)
    notes = [*parse.repairs, *fixed.repairs]
    return QuestionParse(parse.answer, fixed.span, parse.format_ok, parse.repaired or fixed.repaired, notes)


@dataclass(kw_only=True)
class QuestionResult(Result):
    query: str
    answer: str
    span: tuple[float, float] | None

    def own(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        head = {"query": self.query, "answer": self.answer, "span": span_json(self.span)}
        return head, {"format_ok": self.format_ok, "repaired": self.repaired}, {}


def truth_of(example: Mapping[str, Any], query: str | None) -> tuple[float, float] | None:
    """The true span of the example's question ``query`` (examples.json: "questions": [{query, span}])."""
    for item in example.get("questions") or []:
        if item.get("query") == query and item.get("span") is not None:
            return float(item["span"][0]), float(item["span"][1])
    return None


def _span(result: Any) -> tuple[float, float] | None:
    span = value(result, "span")
    return None if span is None else (float(span[0]), float(span[1]))


class QuestionAnswer(Answer):
    """An answer in words and where it is seen; a long video's is the first window's that saw it."""

    form = "Answer: ... / From X to Y."
    returns = (
        'JSON {"variant": str, "model": str, "query": str, "answer": str, "span": [float, float] or null, '
        '"raw": str, "format_ok": bool, "repaired": bool, "metrics": {...}, "runtime": {...}, "partial": '
        '{...} or null, "range": [float, float] or null}.'
    )
    measures = (("span_iou", "span IoU"),)

    def build(self, fixed: QuestionParse, made: Made) -> QuestionResult:
        return made.result(QuestionResult, fixed, query=made.query, answer=fixed.answer, span=fixed.span)

    def merge(self, windows: Sequence[tuple[Result, Window, float]], made: Made) -> QuestionResult:
        answers = []
        for result, window, offset in windows:
            r = cast(QuestionResult, result)
            mapped = map_span(
                SpanParse(r.span, r.format_ok, r.repaired, list(r.info.repairs)), window, offset
            )
            answers.append(QuestionParse(r.answer, mapped.span, r.format_ok, r.repaired, mapped.repairs))
        seen = next((a for a in answers if a.span is not None), answers[0])
        made.info.repairs = [note for a in answers for note in a.repairs]
        both = dataclasses.replace(seen, repaired=any(a.repaired for a in answers))
        return self.build(dataclasses.replace(both, format_ok=all(a.format_ok for a in answers)), made)

    def text(self, result: Result) -> list[str]:
        r = cast(QuestionResult, result)
        seen = "(no span could be read)" if r.span is None else f"{seconds(r.span[0])} - {seconds(r.span[1])}"
        return [f"Question: {r.query}", f"Answer: {r.answer or '(none)'}", f"Seen: {seen}"]

    def agree(self, a: Any, b: Any, min_iou: float) -> dict[str, float]:
        return {"span_iou": metrics.temporal_iou(_span(a), _span(b))}

    def truth(self, example: Mapping[str, Any], query: str | None) -> tuple[float, float] | None:
        return truth_of(example, query)

    def score(self, result: Any, example: Mapping[str, Any], query: str | None) -> dict[str, Any]:
        ref = truth_of(example, query if query is not None else value(result, "query"))
        return {} if ref is None else {"iou": metrics.temporal_iou(_span(result), ref)}

    def score_row(self, scores: Mapping[str, Any]) -> dict[str, Any]:
        return {"IoU vs truth": scores.get("iou")}

    def record(self, result: Result) -> dict[str, Any]:
        r = cast(QuestionResult, result)
        return {"answer": r.answer, "span": span_json(r.span)}


QUESTION = register_task(
    Task(
        name="question",
        order=30,
        help="an answer to a question about a video, and when it is seen",
        prompt=lambda query: PROMPT.format(question=query),
        parse=parse_question,
        repair=repair_question,
        answer=QuestionAnswer(),
        max_new_tokens="question_max_new_tokens",  # its own settings: a sentence and a span
        window_s="question_window_s",
        overlap_s="question_overlap_s",
        brings=(
            TaskSetting(
                "question_max_new_tokens", 64, "MARLIN_QUESTION_MAX_NEW_TOKENS", "token limit for answers"
            ),
            TaskSetting("question_window_s", 30.0, "MARLIN_QUESTION_WINDOW_S", "question window length (s)"),
            TaskSetting(
                "question_overlap_s", 5.0, "MARLIN_QUESTION_OVERLAP_S", "overlap of question windows (s)"
            ),
        ),
        query=True,
        query_label="Your question about the clip",
        query_placeholder="e.g. what colour is the square?",
        query_help='A question about the clip in plain words, e.g. "what does the person hold?" (not empty).',
        examples=lambda example: [q["query"] for q in example.get("questions") or []],
        noun="a question",
        plural="questions",
        summary="Answer a question about a video in a sentence, with the span where the answer is seen.",
    )
)
