"""Rewrites of generic MLIR text that bridge jaxlib's MLIR and mlir-opt 22.

jaxlib is built from a different LLVM revision than the pip ``mlir-opt``, so
the printed IR can use syntax the other side does not parse yet (or any more).
Each difference is one entry of ``RULES``; nothing else in the project may
patch MLIR text, so that every skew is visible, explained, and removable in
one place when the two revisions meet again.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["Rule", "RULES", "normalize_generic_mlir"]


@dataclasses.dataclass(frozen=True)
class Rule:
  """One textual rewrite.

  Attributes:
    name: a short identifier, used in tests and reports.
    pattern: a regular expression matched against the generic MLIR text.
    replacement: the ``re.sub`` replacement.
    why: which side is newer and what the rewrite loses (if anything).
  """

  name: str
  pattern: re.Pattern[str]
  replacement: str
  why: str


def _rule(name: str, pattern: str, replacement: str, why: str) -> Rule:
  return Rule(name, re.compile(pattern), replacement, why)


RULES: tuple[Rule, ...] = (
    _rule(
        "gpu-barrier-scope",
        r'"gpu\.barrier"\(\) <\{scope = #gpu\.barrier_scope<workgroup>\}>',
        '"gpu.barrier"()',
        "jaxlib's gpu.barrier carries a scope attribute that MLIR 22 does not"
        " know; workgroup is the only scope MLIR 22 lowers (bar.sync), so"
        " dropping it keeps the meaning.",
    ),
    _rule(
        "dotted-enum-attrs",
        r"#(gpu|nvvm)\.(dim|shfl_kind)<([a-z_]+)>",
        r"#\1<\2 \3>",
        "jaxlib 0.11's MLIR prints these enum attributes dotted (#gpu.dim<x>,"
        " #nvvm.shfl_kind<idx>); MLIR 22 only parses the older spelling"
        " (#gpu<dim x>, #nvvm<shfl_kind idx>) of the same attribute, so nothing"
        " is lost. jaxlib 0.10 prints the old spelling: the rule does not match.",
    ),
    _rule(
        "gpu-launch-segments",
        r'("gpu\.launch"\([^)]*\) <\{operandSegmentSizes = array<i32: (?:\d+, ){10}\d+), 0>',
        r"\1>",
        "jaxlib 0.11's gpu.launch has a twelfth operand group, appended after"
        " the eleven that MLIR 22 knows (async deps, grid, block, cluster, dynamic"
        " SMEM). Mosaic leaves it empty; dropping its 0 size restores MLIR 22's"
        " layout, and a non-empty one is left alone (mlir-opt then says so).",
    ),
    _rule(
        "mbarrier-init-layout",
        r'("nvvm\.mbarrier\.init"\([^)]*\)) <\{layout = 0 : i32\}>',
        r"\1",
        "jaxlib 0.12's nvvm.mbarrier.init has an optional `layout` property that"
        " MLIR 22's op does not have (`this operation does not support"
        " properties`). Mosaic leaves it at its default, 0, which is the only"
        " form MLIR 22 lowers (mbarrier.init.shared.b64), so dropping it keeps"
        " the meaning; any other value is left alone and mlir-opt says so."
        " jaxlib 0.10 and 0.11 print no such property: the rule does not match.",
    ),
)


def normalize_generic_mlir(text: str, rules: tuple[Rule, ...] = RULES) -> str:
  """Applies every rule of ``rules`` in order to generic-form MLIR ``text``.

  Args:
    text: MLIR printed with ``print_generic_op_form=True``.
    rules: the table to apply (tests pass a custom one).

  Returns:
    The rewritten text; text that no rule matches is returned unchanged.
  """
  for rule in rules:
    text = rule.pattern.sub(rule.replacement, text)
  return text
