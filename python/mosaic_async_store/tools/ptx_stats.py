"""Static statistics of a compiled kernel: PTX opcodes, ptxas report, SASS.

Pure text processing, no tools and no MLIR: ``toolchain.compile_module`` feeds
it the PTX, the ``ptxas -v`` report and the ``cuobjdump --dump-sass`` listing.
The counts are what the project's PTX tests and the static cost report compare,
so the parsers are strict about what counts as an instruction.
"""

from __future__ import annotations

import collections
import dataclasses
import re

__all__ = [
    "Stats", "STORE_PREFIXES", "ASYNC_KINDS", "async_kind", "ptx_opcodes", "parse_ptxas_report",
    "sass_instructions", "with_launch",
]

# Opcode prefixes that write memory or take part in an asynchronous store's
# barrier and addressing protocol; ``Stats.stores`` counts exactly these.
STORE_PREFIXES = (
    "st.", "red.", "atom.", "cp.async.bulk.", "mbarrier.arrive",
    "mbarrier.expect_tx", "mbarrier.complete_tx", "mapa.", "shfl.sync.",
)

# The asynchronous and synchronising instructions a kernel's stats count, by kind: the
# first pattern that matches a full PTX opcode names its kind (order matters: multicast
# before a plain TMA load, the tensor forms before other bulk copies).
ASYNC_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern)) for kind, pattern in (
        ("TMA load multicast", r"^cp\.async\.bulk\.tensor\..*\.global.*multicast::cluster"),
        ("TMA load", r"^cp\.async\.bulk\.tensor\.\d+d\.shared::(?:cluster|cta)\.global"),
        ("TMA store", r"^cp\.async\.bulk\.tensor\.\d+d\.global\.shared"),
        ("TMA reduction", r"^cp\.reduce\.async\.bulk\.tensor"),
        ("TMA prefetch", r"^cp\.async\.bulk\.prefetch"),
        ("bulk copy multicast", r"^cp\.async\.bulk\..*multicast::cluster"),
        ("bulk copy", r"^cp\.(?:reduce\.)?async\.bulk\.(?:global|shared)"),
        ("bulk group commit", r"^cp\.async\.bulk\.commit_group"),
        ("bulk group wait", r"^cp\.async\.bulk\.wait_group"),
        ("WGMMA", r"^wgmma\.mma_async"),
        ("WGMMA fence, commit, wait", r"^wgmma\.(?:fence|commit_group|wait_group)"),
        ("tcgen05", r"^tcgen05\."),
        ("st.async", r"^st\.async"),
        ("red.async", r"^red\.async"),
        ("mbarrier init", r"^mbarrier\.init"),
        ("mbarrier arrive", r"^mbarrier\.(?:arrive|expect_tx|complete_tx)"),
        ("mbarrier wait", r"^mbarrier\.(?:try_wait|test_wait)"),
        ("async proxy fence", r"^fence\.proxy\.async"),
        ("CTA barrier", r"^(?:bar|barrier)\.(?:sync|arrive|red)|^barrier\.cta"),
        ("cluster barrier", r"^barrier\.cluster"),
        ("setmaxnreg", r"^setmaxnreg"),
    ))


def async_kind(opcode: str) -> str | None:
  """The kind (a name of ``ASYNC_KINDS``) of a full PTX opcode, or None."""
  return next((kind for kind, pattern in ASYNC_KINDS if pattern.search(opcode)), None)


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# A label (``$L__BB0_1:``, ``done:``); ``(?!:)`` keeps ``shared::cluster`` out.
_LABEL = re.compile(r"^[A-Za-z_$%][\w$]*:(?!:)")
# Optional guard predicate (``@%p1``, ``@!p``), then the opcode.
_OPCODE = re.compile(r"^(?:@!?%?[\w$]+\s+)?([a-z][\w.:]*)")
_WIDTH = re.compile(r"(?:\.v([248]))?\.[bfsu](\d+)$")
_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", re.M)
_SASS_PRED = re.compile(r"^@!?U?P(?:T|\d+)\s+")
# Stores and reductions to shared memory (STAS, REDAS: st.async/red.async;
# STS, ATOMS: local shared; ST/RED: generic addresses, which includes
# shared::cluster).  REDUX is a warp reduction, not a store: excluded.
_SASS_STORE = re.compile(r"^(?:STAS|REDAS|STS|ATOMS)|^(?:ST|RED)(?:\.|$)")


def _strip_lead(line: str) -> str:
  """Removes block braces and labels in front of a PTX statement."""
  while True:
    line = line.strip()
    if line[:1] in ("{", "}"):
      line = line[1:]
      continue
    label = _LABEL.match(line)
    if label is None:
      return line
    line = line[label.end():]


def _statements(ptx: str) -> list[str]:
  """Splits PTX into statements, without comments, labels and braces.

  Statements end with ``;``.  Inline asm from ``llvm.inline_asm`` is pasted
  verbatim, so one line may hold several statements, ``{ .reg ...; ... }``
  blocks, or labels; lines without ``;`` (``.entry`` headers, parameter
  lists, labels, braces) are glued to the statement that follows them and
  are dropped here.
  """
  out = []
  for piece in _COMMENT.sub("", ptx).split(";"):
    lines = [_strip_lead(line) for line in piece.splitlines()]
    lines = [line for line in lines if line]
    while len(lines) > 1 and lines[0][0] in ".()":
      lines.pop(0)
    statement = " ".join(lines)
    if statement.startswith(".") and "{" in statement:
      # A hand-written ``.entry k() { mov ...;`` line: keep what follows.
      statement = _strip_lead(statement.rsplit("{", 1)[1])
    if statement:
      out.append(statement)
  return out


def ptx_opcodes(ptx: str) -> collections.Counter[str]:
  """Counts the full opcode of every PTX instruction (directives excluded)."""
  counts: collections.Counter[str] = collections.Counter()
  for statement in _statements(ptx):
    match = _OPCODE.match(statement)
    if match is not None:
      counts[match.group(1)] += 1
  return counts


def parse_ptxas_report(report: str) -> dict[str, int]:
  """Registers, spills and shared memory from ``ptxas -v`` output.

  With several functions, registers and shared memory are the maximum and
  spills the sum, so one number bounds the whole module.
  """

  def numbers(pattern: str) -> list[int]:
    return [int(n) for n in re.findall(pattern, report)]

  return {
      "registers": max(numbers(r"Used (\d+) registers"), default=0),
      "spill_stores": sum(numbers(r"(\d+) bytes spill stores")),
      "spill_loads": sum(numbers(r"(\d+) bytes spill loads")),
      "shared_memory": max(numbers(r"(\d+) bytes smem"), default=0),
  }


def sass_instructions(sass: str) -> list[str]:
  """The opcodes (with modifiers, e.g. ``STAS.64``) of a SASS listing.

  Each function is cut after its last ``EXIT``: what follows (a branch to
  itself and NOPs) only pads the code to its alignment.
  """
  opcodes: list[str] = []
  for function in re.split(r"\n\s*Function\s*:", sass):
    ops = [_SASS_PRED.sub("", text).split()[0]
           for text in _SASS_LINE.findall(function)]
    exits = [i for i, op in enumerate(ops) if op == "EXIT"]
    opcodes += ops[:exits[-1] + 1] if exits else ops
  return opcodes


def _store_span(opcodes: list[str]) -> int:
  positions = [i for i, op in enumerate(opcodes) if _SASS_STORE.match(op)]
  return positions[-1] - positions[0] + 1 if positions else 0


@dataclasses.dataclass(frozen=True)
class Stats:
  """What a kernel costs, statically.

  Attributes:
    registers: registers per thread (ptxas).
    spill_stores: bytes spilled to local memory (ptxas).
    spill_loads: bytes reloaded from local memory (ptxas).
    shared_memory: static shared memory in bytes (ptxas; Mosaic's dynamic
      shared memory is not part of it: a Mosaic kernel's is a byte or so).
    stores: full PTX opcode -> count, for every opcode in STORE_PREFIXES.
    ptx_instructions: PTX instructions (no directives, labels or braces).
    sass_instructions: SASS instructions up to the last EXIT.
    sass_store_span: SASS instructions from the first to the last store or
      reduction into shared memory, both included (0: none).
    sass_opcodes: SASS opcode with modifiers -> count.
    async_opcodes: full PTX opcode -> count, for every opcode of an ``ASYNC_KINDS``
      kind (TMA, bulk copies and groups, WGMMA, st.async/red.async, mbarriers,
      barriers, setmaxnreg).
    dynamic_shared_memory: the dynamic shared memory per CTA the kernel is launched
      with, in bytes (its ``gpu.launch``'s ``dynamic_shared_memory_size``: where a
      Mosaic kernel's scratch, barriers and SMEM refs live), or None where not known
      (``with_launch`` fills it in from the kernel's MLIR).
  """

  registers: int
  spill_stores: int
  spill_loads: int
  shared_memory: int
  stores: dict[str, int]
  ptx_instructions: int
  sass_instructions: int
  sass_store_span: int
  sass_opcodes: dict[str, int]
  async_opcodes: dict[str, int] = dataclasses.field(default_factory=dict)
  dynamic_shared_memory: int | None = None

  @classmethod
  def from_outputs(cls, ptx: str, ptxas_report: str, sass: str) -> Stats:
    """Builds the statistics from the three texts the toolchain produces."""
    opcodes = ptx_opcodes(ptx)
    sass_ops = sass_instructions(sass)
    return cls(
        **parse_ptxas_report(ptxas_report),
        stores={op: n for op, n in sorted(opcodes.items())
                if op.startswith(STORE_PREFIXES)},
        ptx_instructions=sum(opcodes.values()),
        sass_instructions=len(sass_ops),
        sass_store_span=_store_span(sass_ops),
        sass_opcodes=dict(sorted(collections.Counter(sass_ops).items())),
        async_opcodes={op: n for op, n in sorted(opcodes.items()) if async_kind(op)},
    )

  @property
  def asynchronous(self) -> dict[str, int]:
    """Instructions per ``ASYNC_KINDS`` kind, in the table's order (kinds absent: 0
    rows are left out)."""
    counts: collections.Counter[str] = collections.Counter()
    for op, n in self.async_opcodes.items():
      counts[async_kind(op)] += n
    return {kind: counts[kind] for kind, _ in ASYNC_KINDS if counts[kind]}

  @property
  def st_async_by_width(self) -> dict[int, int]:
    """Bytes moved by one st.async (4, 8, 16) -> number of such st.async."""
    widths: collections.Counter[int] = collections.Counter()
    for op, n in self.stores.items():
      match = _WIDTH.search(op)
      if op.startswith("st.async") and match is not None:
        widths[int(match.group(1) or 1) * int(match.group(2)) // 8] += n
    return dict(sorted(widths.items()))

  @property
  def red_async(self) -> int:
    """Number of red.async instructions, any operation and type."""
    return sum(n for op, n in self.stores.items() if op.startswith("red.async"))


def with_launch(stats: Stats, mlir: str) -> Stats:
  """``stats`` with the dynamic shared memory of the kernel whose Lane-level MLIR (its
  ``gpu.launch`` in the pretty form) is ``mlir``; unchanged where it has no launch of
  constant shape."""
  from mosaic_async_store.errors import AsyncStoreError
  from mosaic_async_store.tools.check_kernel import launch_shape
  try:
    smem = launch_shape(mlir)["smem_bytes"]
  except AsyncStoreError:
    return stats
  return dataclasses.replace(stats, dynamic_shared_memory=smem)
