"""The variants of Marlin-2B the demo can run, in one table every layer reads: a new kind is one
``register`` call; ``MARLIN_EXTRA_VARIANTS`` folders are not kinds (their checkpoint says how they load)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Loader = Literal["gptq", "bnb4", "transformers"]

#: colours for variants the table does not know (extra folders), in order of appearance
EXTRA_COLORS = ("#0ea5e9", "#ef4444", "#ec4899", "#6366f1", "#10b981")

REINSTALL = "reinstall it with `pip install -r requirements.txt`"


@dataclass(frozen=True)
class VariantKind:
    """One kind of variant: its facts, read by settings, models, start-up, bench, plots and the page."""

    name: str  # the key in settings, JSON and the API ("gptq")
    label: str  # what a visitor reads ("GPTQ 4-bit")
    short: str  # in table headings and comparisons ("GPTQ")
    color: str  # the same in the page's charts and the bench's plots
    loader: Loader  # which loader in ``models`` runs it
    package: str  # the package its loader needs (named when the load fails)
    # where its weights come from: by default the 16-bit checkpoint's, which most kinds load another way
    repo_field: str = "bf16_id"  # the ``Settings`` field holding its Hub id (or local folder)
    revision_field: str = "revision"  # the ``Settings`` field holding that repo's revision
    tiny_folder: str = "bf16"  # the tiny stand-in's folder it loads from ("gptq" or "bf16")
    fix: str = REINSTALL  # what to do when that package is missing or broken
    dtype: str = "bfloat16"  # torch dtype of its 16-bit weights and compute

    @property
    def own_checkpoint(self) -> bool:
        """Its weights are a checkpoint of their own (GPTQ), not the 16-bit weights loaded another way."""
        return self.loader == "gptq"


_KINDS: dict[str, VariantKind] = {}


def register(kind: VariantKind) -> VariantKind:
    """Add (or replace) a kind; returns it."""
    _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove a kind (tests that register one clean up with this)."""
    _KINDS.pop(name, None)


def kinds() -> tuple[VariantKind, ...]:
    return tuple(_KINDS.values())


def kind_of(name: str) -> VariantKind | None:
    return _KINDS.get(name)


def unknown(name: str, offered: list[str] | tuple[str, ...]) -> str:
    """The one sentence every entry point refuses an unknown variant with (what is allowed, too)."""
    return f"Unknown variant {name!r}: choose one of {', '.join(offered)}."


def label(name: str) -> str:
    """The name a visitor reads for a variant (its key when it has none)."""
    return kind.label if (kind := _KINDS.get(name)) else name


def short(name: str) -> str:
    return kind.short if (kind := _KINDS.get(name)) else name


def colors(names: list[str] | tuple[str, ...]) -> dict[str, str]:
    """One colour per variant, the same in every chart (table colours first, then ``EXTRA_COLORS``)."""
    extras = iter(EXTRA_COLORS * 4)
    return {name: kind.color if (kind := _KINDS.get(name)) else next(extras) for name in names}


register(
    VariantKind(
        name="gptq",
        label="GPTQ 4-bit",
        short="GPTQ",
        color="#0d9488",
        loader="gptq",
        repo_field="gptq_id",
        revision_field="gptq_revision",
        tiny_folder="gptq",
        package="gptqmodel",
    )
)
register(
    VariantKind(
        name="bnb4",
        label="bnb4 (nf4 4-bit)",
        short="bnb4",
        color="#f59e0b",
        loader="bnb4",
        package="bitsandbytes",
    )
)
register(
    VariantKind(
        name="bf16",
        label="bf16 (16-bit)",
        short="bf16",
        color="#8b5cf6",
        loader="transformers",
        package="transformers",
    )
)

#: The headline comparison of the demo and its benchmark: JSON keys such as ``gptq_vs_bnb4`` name it.
HEADLINE: tuple[str, str] = ("gptq", "bnb4")
