"""What ptxas makes of each PTX reduction form into shared memory (CPU only).

For every reduction that has more than one legal PTX spelling, a small kernel
issues ``N`` of them (each at its own immediate offset, each with its own data
register) into the executing CTA's shared memory or into a peer's (an address
from ``mapa``), and is assembled by the deviceless toolchain's ptxas.  The SASS
instructions one reduction costs are ``(count(N) - count(0)) / N``; dividing by
the bytes it carries gives a figure that compares a 2-byte ``f16`` with a 4-byte
``f16x2``, or one 8-byte ``and.b64`` with two 4-byte ``and.b32`` halves.

A form ptxas rejects is reported with ptxas' message (e.g. ``red.async`` of a
float).  Whether a form is *legal* also needs the PTX ISA: ``red.async`` into the
executing CTA is undefined (its destination's CTA must differ from the
executing thread's), so the local rows never list it.

  python bench/reduction_forms.py [--arch sm_90a] [--n 8] [--out FILE.md]

It also assembles one whole store kernel two ways (``--kernel-only`` prints just
that): ``compile --dtype i64 --atomic xor --target peer --shape 64x64`` as emitted
(two ``red.async .xor.b32`` per element), and its PTX rewritten to the plain
``red.relaxed.cluster.shared::cluster.xor.b32`` halves with a ``.release.cluster``
arrive, the other legal form.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import datetime
import io
import platform
import re
import subprocess
import sys

from mosaic_async_store.tools import cli, ptx_stats, toolchain

__all__ = ["Form", "FORMS", "kernel_ptx", "measure", "kernel_forms", "main"]

_ASYNC = "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes"


@dataclasses.dataclass(frozen=True)
class Form:
  """One way to spell a reduction of ``what`` (a label, e.g. ``f32 add``).

  ``opcode`` is the PTX opcode with ``{space}`` for the state space; ``bits`` the
  width of one instruction's data, ``element_bits`` of one element (32 and 64:
  an element as two 32-bit halves; 32 and 16: a packed pair of elements)."""
  what: str
  opcode: str
  bits: int
  element_bits: int

  @property
  def is_async(self) -> bool:
    return self.opcode.startswith("red.async")

  def spelled(self, space: str) -> str:
    return self.opcode.format(space=space)


def _plain(op_type: str) -> str:
  return "red.relaxed.cluster.{space}." + op_type


def _forms() -> tuple[Form, ...]:
  out = [Form("i32 add (reference)", f"{_ASYNC}.add.s32", 32, 32),
         Form("i32 add (reference)", _plain("add.s32"), 32, 32)]
  for name in ("f32", "f64"):
    bits = int(name[1:])
    out += [Form(f"{name} add", f"{_ASYNC}.add.{name}", bits, bits),
            Form(f"{name} add", _plain(f"add.{name}"), bits, bits),
            Form(f"{name} add", "red.{space}.add." + name, bits, bits)]
  for name in ("f16", "bf16"):
    out += [Form(f"{name} add", _plain(f"add.noftz.{name}"), 16, 16),
            Form(f"{name} add", _plain(f"add.noftz.{name}x2"), 32, 16)]
  out += [Form("u64 add", f"{_ASYNC}.add.u64", 64, 64),
          Form("u64 add", _plain("add.u64"), 64, 64)]
  for op, types in (("min", ("u64", "s64")), ("max", ("u64", "s64"))):
    for t in types:
      out += [Form(f"{t} {op}", f"{_ASYNC}.{op}.{t}", 64, 64),
              Form(f"{t} {op}", _plain(f"{op}.{t}"), 64, 64)]
  for op in ("and", "or", "xor"):
    out += [Form(f"b64 {op}", f"{_ASYNC}.{op}.b64", 64, 64),
            Form(f"b64 {op}", _plain(f"{op}.b64"), 64, 64),
            Form(f"b64 {op}", f"{_ASYNC}.{op}.b32", 32, 64),
            Form(f"b64 {op}", _plain(f"{op}.b32"), 32, 64)]
  return tuple(out)


FORMS = _forms()

# Where the reduction goes: (label, state space, whether the address is mapa'd).
WHERES = (("peer", "shared::cluster", True),
          ("own CTA, cluster window", "shared::cluster", False),
          ("own CTA, CTA window", "shared::cta", False))


def kernel_ptx(form: Form, space: str, mapped: bool, n: int) -> str:
  """A kernel issuing ``n`` reductions of ``form``; its data differs per instruction."""
  reg = {16: "%h", 32: "%r", 64: "%rd"}[form.bits]
  body = []
  for i in range(n):
    v = f"{reg}{100 + i}"
    if form.bits == 16:
      body.append(f"add.u32 %r{300 + i}, %r2, {i + 1};")
      body.append(f"cvt.u16.u32 {v}, %r{300 + i};")
    elif form.bits == 32:
      body.append(f"add.u32 {v}, %r2, {i + 1};")
    else:
      body.append(f"add.u64 {v}, %rd2, {i + 1};")
    bar = ", [%r7]" if form.is_async else ""
    body.append(f"{form.spelled(space)} [%r6+{256 * i}], {v}{bar};")
  mapa = ("mapa.shared::cluster.u32 %r6, %r6, %r3;\n  "
          "mapa.shared::cluster.u32 %r7, %r7, %r3;" if mapped else "")
  return f""".version 8.6
.target {{arch}}
.address_size 64

.visible .entry forms(.param .u32 p_base, .param .u32 p_val, .param .u32 p_rank,
                      .param .u32 p_bar, .param .u64 p_val64)
{{
  .reg .b16 %h<400>;
  .reg .b32 %r<400>;
  .reg .b64 %rd<400>;
  ld.param.u32 %r1, [p_base];
  ld.param.u32 %r2, [p_val];
  ld.param.u32 %r3, [p_rank];
  ld.param.u32 %r7, [p_bar];
  ld.param.u64 %rd2, [p_val64];
  mov.u32 %r4, %tid.x;
  shl.b32 %r5, %r4, 3;
  add.u32 %r6, %r1, %r5;
  {mapa}
  {chr(10).join('  ' + s for s in body).strip()}
  ret;
}}
"""


def _sass(ptx: str, arch: str) -> tuple[int, collections.Counter] | str:
  try:
    cubin, _ = toolchain.ptx_to_cubin(ptx.replace("{arch}", arch), arch)
  except toolchain.CompileError as err:
    lines = [ln for ln in str(err).splitlines() if "error" in ln or "fatal" in ln]
    return (lines[0].split(";", 1)[-1].strip() if lines else "rejected")
  ops = ptx_stats.sass_instructions(toolchain.cubin_to_sass(cubin))
  return len(ops), collections.Counter(ops)


@dataclasses.dataclass(frozen=True)
class Row:
  form: Form
  where: str
  per_instruction: float | None   # SASS instructions per reduction
  per_element: float | None       # ... per element (halves and pairs counted)
  opcodes: str                    # the SASS opcodes the N reductions added
  rejected: str = ""


def measure(form: Form, where: tuple[str, str, bool], arch: str, n: int) -> Row:
  label, space, mapped = where
  full = _sass(kernel_ptx(form, space, mapped, n), arch)
  if isinstance(full, str):
    return Row(form, label, None, None, "", full)
  empty = _sass(kernel_ptx(form, space, mapped, 0), arch)
  assert not isinstance(empty, str), empty
  per = (full[0] - empty[0]) / n
  added = full[1] - empty[1]
  top = ", ".join(f"{op} {k / n:g}" for op, k in added.most_common()
                  if op.startswith(("ATOM", "RED", "QSPC", "ST", "LD", "SYNCS", "CCTL")))
  return Row(form, label, per, per * form.element_bits / form.bits, top)


def table(rows: list[Row]) -> str:
  lines = ["| reduction | PTX form (one instruction) | into | SASS per instruction | "
           "SASS per element | memory SASS per instruction |",
           "| --- | --- | --- | --- | --- | --- |"]
  for r in rows:
    form = r.form.spelled("{space}").replace("{space}", "X")
    if r.form.bits != r.form.element_bits:
      form += " (halves)" if r.form.bits < r.form.element_bits else " (pairs)"
    if r.rejected:
      lines.append(f"| {r.form.what} | `{form}` | {r.where} | rejected by ptxas: "
                   f"{r.rejected} | | |")
    else:
      lines.append(f"| {r.form.what} | `{form}` | {r.where} | {r.per_instruction:g} | "
                   f"{r.per_element:g} | {r.opcodes} |")
  return "\n".join(lines)


_RED_ASYNC_HALF = re.compile(
    r"red\.async\.relaxed\.cluster\.shared::cluster\.mbarrier::complete_tx::bytes\.xor\.b32 "
    r"(\[[^\]]+\]), (%r\d+), \[%r\d+\];")


def kernel_forms(arch: str) -> dict[str, int]:
  """SASS instructions of the i64 xor peer kernel, as emitted and with plain halves."""
  argv = ["compile", "--dtype", "i64", "--atomic", "xor", "--target", "peer", "--shape",
          "64x64", "--arch", arch, "--emit", "ptx"]
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    assert cli.main(argv) == 0
  emitted = out.getvalue()
  plain, n = _RED_ASYNC_HALF.subn(r"red.relaxed.cluster.shared::cluster.xor.b32 \1, \2;",
                                  emitted)
  assert n == 64, n
  plain = plain.replace("mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64",
                        "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64")
  counts = {}
  for name, ptx in (("red.async .b32 halves (emitted)", emitted),
                    ("plain .b32 halves + release arrive", plain)):
    ops = ptx_stats.sass_instructions(toolchain.cubin_to_sass(
        toolchain.ptx_to_cubin(ptx, arch)[0]))
    counts[name] = len(ops)
  return counts


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--arch", default="sm_90a", choices=toolchain.ARCHS)
  parser.add_argument("--n", type=int, default=8, help="reductions per kernel (default 8)")
  parser.add_argument("--out", help="write the markdown table here too")
  parser.add_argument("--kernel-only", action="store_true",
                      help="only the whole i64 xor kernel, emitted and with plain halves")
  args = parser.parse_args(argv)
  kernel = "\n".join(f"- i64 xor 64x64 into a peer, {name}: {n} SASS instructions"
                      for name, n in kernel_forms(args.arch).items())
  if args.kernel_only:
    print(kernel)
    return 0
  rows = []
  for form in FORMS:
    for where in WHERES:
      if form.is_async and not where[2]:
        continue  # red.async into the executing CTA is undefined behaviour
      rows.append(measure(form, where, args.arch, args.n))
  ptxas = subprocess.run([str(toolchain.find_tool("ptxas")), "--version"], capture_output=True,
                         text=True, check=True).stdout.strip().splitlines()[-1]
  head = (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"{args.arch}, {ptxas}, Python {platform.python_version()}, "
          f"N={args.n}\n\nX is the state space of the column 'into' "
          "(shared::cluster or shared::cta).\n\n")
  text = head + table(rows) + "\n\n" + kernel + "\n"
  print(text)
  if args.out:
    with open(args.out, "w") as f:
      f.write(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
