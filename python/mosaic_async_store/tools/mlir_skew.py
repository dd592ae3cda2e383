"""Every edit of MLIR text the project makes, each a named rule with its reason.

Two gaps sit between a module that jaxlib builds and the PTX that upstream's GPU path
would emit for it, and mlir-opt 22 from PyPI closes neither by itself:

* syntax skew: jaxlib is built from a different LLVM revision than the pip
  ``mlir-opt``, so the printed IR can use syntax the other side does not parse yet
  (or any more), or name an LLVM intrinsic with another signature (tcgen05.commit);
* Mosaic's private passes (jaxlib/mosaic/gpu/passes.cc and its pipeline), which
  mlir-opt does not have: the TMA descriptor argument passed by value
  (``mosaic-byval-insertion``), ``nvvm.minctasm`` for ``setmaxnreg``
  (``mosaic-llvm-attr-insertion``), and the 1-D ``vector.extract_strided_slice``
  that Mosaic's GPU-to-LLVM conversion turns into a shuffle.

``RULES`` are applied to the module as jaxlib prints it (generic form), before
mlir-opt; ``KERNEL_RULES`` to the outlined kernels, between the two stages of the
pipeline (``toolchain.pipeline_stages``), where the kernel is an ``llvm.func`` whose
arguments can carry attributes.  Nothing else in the project may edit MLIR text, so
that every difference is visible, explained, and removable in one place.  A rule that
does not match leaves the text as it was: a kernel that needs none of them compiles
to the same PTX as before they existed.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

__all__ = ["Rule", "KernelRule", "RULES", "KERNEL_RULES", "normalize_generic_mlir",
           "prepare_outlined_kernels", "kernel_functions", "split_top_level"]


@dataclasses.dataclass(frozen=True)
class Rule:
  """One textual rewrite: ``pattern.sub(replacement, text)``.

  Attributes:
    name: a short identifier, used in tests and reports.
    pattern: a regular expression matched against the generic MLIR text.
    replacement: the ``re.sub`` replacement (a string or a function of the match).
    why: which side is newer, or which upstream pass it stands for, and what the
      rewrite loses (if anything).
  """

  name: str
  pattern: re.Pattern[str]
  replacement: str | Callable[[re.Match[str]], str]
  why: str

  def apply(self, text: str) -> str:
    return self.pattern.sub(self.replacement, text)


@dataclasses.dataclass(frozen=True)
class KernelRule:
  """One rewrite of an outlined kernel function (``"llvm.func"`` with ``nvvm.kernel``).

  Attributes:
    name, why: as for ``Rule``.
    rewrite: the kernel's text (from its ``"llvm.func"`` line to its closing line)
      -> the rewritten text.
  """

  name: str
  rewrite: Callable[[str], str]
  why: str

  def apply(self, text: str) -> str:
    pieces, end = [], 0
    for start, stop in kernel_functions(text):
      pieces += [text[end:start], self.rewrite(text[start:stop])]
      end = stop
    return "".join(pieces) + text[end:]


def _rule(name: str, pattern: str, replacement, why: str) -> Rule:
  return Rule(name, re.compile(pattern), replacement, why)


def split_top_level(text: str, sep: str = ",") -> list[str]:
  """``text`` split at each ``sep`` outside brackets (<>, (), [], {}), stripped."""
  parts, depth, current = [], 0, []
  for ch in text:
    if ch in "<([{":
      depth += 1
    elif ch in ">)]}":
      depth -= 1
    if ch == sep and depth == 0:
      parts.append("".join(current).strip())
      current = []
    else:
      current.append(ch)
  tail = "".join(current).strip()
  return parts + [tail] if tail or parts else parts


_EXTRACT_1D = re.compile(
    r'"vector\.extract_strided_slice"\((%[\w#]+)\) <\{offsets = \[(\d+)\], sizes = '
    r'\[(\d+)\], strides = \[1\]\}> : \((vector<\d+x[\w.]+>)\) -> (vector<\d+x[\w.]+>)')


def _extract_to_shuffle(m: re.Match[str]) -> str:
  value, offset, size, source, result = m.groups()
  mask = ", ".join(str(int(offset) + i) for i in range(int(size)))
  return (f'"vector.shuffle"({value}, {value}) <{{mask = array<i64: {mask}>}}> : '
          f"({source}, {source}) -> {result}")


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
    _rule(
        "tcgen05-commit-shared",
        r'(intrin = "llvm\.nvvm\.tcgen05\.commit(?:\.mc)?)(\.cg[12]"[^\n]*?\}> : '
        r'\(!llvm\.ptr<3>)',
        r"\1.shared\2",
        "Mosaic's tcgen05.commit_arrive calls the intrinsic llvm.nvvm.tcgen05.commit.cg1"
        " (.mc.cg2 when collective) on the barrier's shared-memory pointer: in"
        " jaxlib's LLVM those intrinsics take a pointer of any address space. LLVM 22"
        " has one intrinsic per space, and the generic one refuses `ptr addrspace(3)`"
        " (`intrinsic call operand #0 has type ptr addrspace(3) but"
        " \"llvm.nvvm.tcgen05.commit.cg1\" expects ptr`); its .shared variant of the"
        " same name takes it and emits the same instruction (tcgen05.commit ..."
        " .shared::cluster.b64), so nothing is lost. A generic pointer is left alone."
        " jax 0.11 and 0.12 call the intrinsic; jax 0.10 builds the NVVM op"
        " nvvm.tcgen05.commit, which MLIR 22 lowers itself: the rule does not match.",
    ),
    Rule(
        "vector-extract-strided-slice-1d", _EXTRACT_1D, _extract_to_shuffle,
        "Mosaic's GPU-to-LLVM conversion lowers a 1-D vector.extract_strided_slice"
        " (WGMMA accumulators and fragmented arrays split their registers with it)"
        " to llvm.shufflevector; MLIR 22's vector-to-LLVM patterns have no such"
        " lowering (`missing LLVMTranslationDialectInterface registration`). The"
        " same elements as a vector.shuffle of the source with itself (mask: offset"
        " .. offset + size - 1; MLIR requires stride 1) is what MLIR 22 lowers to"
        " llvm.shufflevector, so nothing is lost. Slices of 2-D and wider vectors"
        " are left alone (mlir-opt then names the op).",
    ),
)

# An outlined kernel after convert-gpu-to-nvvm, as mlir-opt prints it (generic form):
#   "llvm.func"() <{..., function_type = !llvm.func<void (T0, T1, ...)>, ...}> ({
#   ^bb0(%arg0: T0, %arg1: T1, ...):
#     ...
#   }) {gpu.kernel, ..., nvvm.kernel, ...} : () -> ()
_FUNC_OPEN = re.compile(r'^( *)(?:%[\w#]+ = )?"llvm\.func"\(\) <\{.*\}> \(\{$', re.M)
_FUNC_TYPE = "function_type = !llvm.func<void ("
_ARG_ATTRS = re.compile(r"arg_attrs = \[")
_BLOCK_ARGS = re.compile(r"^( *)\^bb0\((.*)\):$", re.M)


def kernel_functions(text: str) -> list[tuple[int, int]]:
  """(start, stop) of each ``"llvm.func"`` that is a kernel (``nvvm.kernel``), from
  the start of its first line to the end of its closing line."""
  spans = []
  for m in _FUNC_OPEN.finditer(text):
    # (a location after the type: mlir-opt --mlir-print-debuginfo, the checker's path)
    close = re.compile(rf"^{m.group(1)}\}}\)(?: \{{(.*)\}})? : \(\) -> \(\)(?: loc\(.*\))?$",
                       re.M)
    end = close.search(text, m.end())
    if end is not None and "nvvm.kernel" in (end.group(1) or ""):
      spans.append((m.start(), end.end()))
  return spans


def _bracket_end(text: str, start: int) -> int:
  """The index just past the bracket that closes the one at ``text[start]``."""
  depth = 0
  for i in range(start, len(text)):
    depth += text[i] in "<([{"
    depth -= text[i] in ">)]}"
    if depth == 0:
      return i + 1
  raise ValueError(f"unbalanced brackets from offset {start}")


def _descriptor_args_by_value(kernel: str) -> str:
  head, newline, body = kernel.partition("\n")
  block, at = _BLOCK_ARGS.match(body), head.find(_FUNC_TYPE)
  if block is None or at < 0:
    return kernel
  opening = at + len(_FUNC_TYPE) - 1             # the "(" of the argument list
  closing = _bracket_end(head, opening)          # just past its ")"
  types = split_top_level(head[opening + 1:closing - 1])
  args = split_top_level(block.group(2))
  if len(types) != len(args):
    return kernel
  rest = body[block.end():]
  byval = {}
  for i, (ty, arg) in enumerate(zip(types, args)):
    name, _, _ = arg.partition(":")
    size = re.fullmatch(r"array<(\d+) x i8>", ty)
    cast = (f'"builtin.unrealized_conversion_cast"({name}) : (!llvm.{ty}) -> !llvm.ptr')
    uses = re.findall(re.escape(name) + r"(?![\w#])", rest)
    # Only a descriptor blob that the body reads solely through a pointer cast: that
    # pointer is what upstream's pass hands the body (the parameter's address).
    if size and uses and len(uses) == rest.count(cast):
      byval[i] = (name, ty, size.group(1))
  if not byval:
    return kernel
  for i, (name, ty, _) in byval.items():
    types[i] = "ptr"
    args[i] = f"{name}: !llvm.ptr"
    rest = rest.replace(
        f'"builtin.unrealized_conversion_cast"({name}) : (!llvm.{ty}) -> !llvm.ptr',
        f'"builtin.unrealized_conversion_cast"({name}) : (!llvm.ptr) -> !llvm.ptr')
  attrs = _arg_attr_list(head, len(types))
  for i, (_, ty, _) in byval.items():
    extra = f"llvm.align = 64 : i64, llvm.byval = !llvm.{ty}, nvvm.grid_constant"
    inner = attrs[i][1:-1].strip()
    attrs[i] = "{" + (f"{inner}, {extra}" if inner else extra) + "}"
  head = head[:opening + 1] + ", ".join(types) + head[closing - 1:]
  head = _set_arg_attrs(head, attrs)   # after the splice: it moves what follows it
  bb = f"{block.group(1)}^bb0({', '.join(args)}):"
  return head + newline + bb + rest


def _arg_attr_list(head: str, count: int) -> list[str]:
  m = _ARG_ATTRS.search(head)
  if m is None:
    return ["{}"] * count
  end = _bracket_end(head, m.end() - 1)
  attrs = split_top_level(head[m.end():end - 1])
  return attrs if len(attrs) == count else ["{}"] * count


def _set_arg_attrs(head: str, attrs: list[str]) -> str:
  listed = f"arg_attrs = [{', '.join(attrs)}]"
  m = _ARG_ATTRS.search(head)
  if m is not None:
    return head[:m.start()] + listed + head[_bracket_end(head, m.end() - 1):]
  return head.replace("function_type = ", f"{listed}, function_type = ", 1)


_SETMAXNREG = re.compile(r'"nvvm\.setmaxregister"|setmaxnreg\.')


def _minctasm_for_setmaxnreg(kernel: str) -> str:
  if not _SETMAXNREG.search(kernel) or "nvvm.minctasm" in kernel:
    return kernel
  head, _, closing = kernel.rpartition("\n")
  closing = closing.replace("nvvm.kernel", "nvvm.kernel, nvvm.minctasm = 1 : i32", 1)
  return head + "\n" + closing


KERNEL_RULES: tuple[KernelRule, ...] = (
    KernelRule(
        "tma-descriptor-byval", _descriptor_args_by_value,
        "Mosaic passes a kernel's TMA descriptors as one !llvm.array<N x i8> argument"
        " that the body reads through a pointer (an unrealized cast, which the LLVM"
        " translation cannot take: `LLVM Translation failed for operation:"
        " builtin.unrealized_conversion_cast`). Upstream's mosaic-byval-insertion pass"
        " makes it a pointer argument with llvm.byval (the array type), nvvm.grid_constant"
        " and 64-byte alignment; the cast then folds away and the PTX takes the"
        " descriptors as `.param .align 64 .b8 K_param_0[N]`, addressed with"
        " cvta.param, as upstream's does. Only an array of i8 that the body uses solely"
        " through such casts is rewritten.",
    ),
    KernelRule(
        "setmaxnreg-minctasm", _minctasm_for_setmaxnreg,
        "ptxas honours setmaxnreg only when it knows the register count at the"
        " kernel's entry (`C7508 'setmaxnreg' ignored; unable to determine register"
        " count at entry`); upstream's mosaic-llvm-attr-insertion pass gives every"
        " kernel nvvm.minctasm = 1 (`.minnctapersm 1`), which tells it. Here only"
        " kernels that use setmaxnreg get it, so that every other kernel's PTX stays"
        " as it was.",
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
    text = rule.apply(text)
  return text


def prepare_outlined_kernels(text: str,
                             rules: tuple[KernelRule, ...] = KERNEL_RULES) -> str:
  """Applies ``KERNEL_RULES`` to the generic-form output of the pipeline's first stage
  (outlined kernels as ``llvm.func``); text they do not match is returned unchanged."""
  for rule in rules:
    text = rule.apply(text)
  return text
