"""The grammar of the bulk and tensor copies (TMA), decoded exactly: ``decode_bulk``.

One function of the instruction alone (no machine): ``decode_bulk(text_or_Instr)`` ->
``BulkForm`` for every form of ``cp.async.bulk{.tensor}``, ``cp.reduce.async.bulk{.tensor}``,
``cp.async.bulk.prefetch{.tensor}``, ``cp.async.bulk.commit_group``,
``cp.async.bulk.wait_group{.read}`` and ``prefetch{.space}{.tensormap, .level}``; the
machine glue (the ``cp`` / ``prefetch`` family) runs what it returns.

Sources.  PTX ISA 9.7.9.25 (data movement: bulk and tensor copies).  The ISA's own page
was not among the stored copies this module was written from; its *syntax blocks* were
read from a verbatim copy of the ISA grammar (ptx-90-parser, crates/parser-gen/ptx_syntax/
cp.async.bulk*.txt, cp.reduce.async.bulk*.txt, prefetch.txt, PTX ISA 9.0) and checked
against NVIDIA's CCCL ``cuda::ptx`` pages (which give each form with the PTX ISA version
that added it) and against the forms Mosaic GPU emits (jax/experimental/mosaic/gpu/
launch_context.py).  The syntax, as this module's tables encode it:

  cp.async.bulk.tensor.dim.dst.src{.load_mode}.completion_mechanism{.multicast}{.cta_group}
      {.level::cache_hint}  [dstMem], [tensorMap, tensorCoords], [mbar]{, im2colInfo}
      {, ctaMask}{, cache-policy}        .dst = {.shared::cta, .shared::cluster} (multicast:
                                         .shared::cluster only), .src = {.global}
  cp.async.bulk.tensor.dim.dst.src{.load_mode}.completion_mechanism{.level::cache_hint}
      [tensorMap, tensorCoords], [srcMem]{, cache-policy}      .dst = .global, .src = .shared::cta
  cp.reduce.async.bulk.tensor.dim.dst.src.redOp{.load_mode}.completion_mechanism
      {.level::cache_hint} [tensorMap, tensorCoords], [srcMem]{, cache-policy}
  cp.async.bulk.dst.src.completion_mechanism{.multicast}{.level::cache_hint}
      [dstMem], [srcMem], size, [mbar]{, ctaMask}{, cache-policy}    (global -> shared)
  cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes
      [dstMem], [srcMem], size, [mbar]
  cp.async.bulk.global.shared::cta.bulk_group{.level::cache_hint}{.cp_mask}
      [dstMem], [srcMem], size{, cache-policy}{, byteMask}
  cp.reduce.async.bulk.dst.src.completion_mechanism{.level::cache_hint}.redOp{.noftz}.type
      [dstMem], [srcMem], size{, [mbar] | , cache-policy}
  cp.async.bulk.prefetch.tensor.dim.L2.src{.load_mode}{.level::cache_hint}
      [tensorMap, tensorCoords]{, im2colInfo}{, cache-policy}
  cp.async.bulk.prefetch.L2.src{.level::cache_hint} [srcMem], size{, cache-policy}
  cp.async.bulk.commit_group;   cp.async.bulk.wait_group{.read} N;
  prefetch{.space}.level [a];  prefetch.global.level::eviction_priority [a];
  prefetch{.tensormap_space}.tensormap [a];

The load mode is optional ("{.load_mode}"): Mosaic emits its tiled loads without it, and
the tile mode is the one the checker runs.  Every qualifier of those tables is either run
(``.tile``, ``.multicast::cluster`` with its ctaMask, ``.L2::cache_hint`` with its
cache-policy operand: a performance hint, "treated as a performance hint only" as the ISA
says of cache hints, so it has no effect here; ``.cta_group::1`` / ``::2``, which say
where the mbarrier may be, ``BulkForm.cta_group``) or refused by name with
NotImplementedError (``.im2col*``, ``.tile::gather4`` / ``::scatter4``, ``.cp_mask``,
``.ignore_oob``: forms the checker does not model; ``.multicast::cluster`` together with
``.cta_group::2``: which CTA's mbarrier each destination signals is not in the ISA's
sentence the checker rests on, 9.7.9.25.5.1, which speaks of one ``dstMem``).  A qualifier, operand count or operand
kind that the ISA grammar has not is ``NotInIsa`` (a NotImplementedError too, so the
parser refuses the kernel naming the line; its message says the PTX is not valid).

Operands.  A text is parsed here (``parse_operand``): registers ``("reg", name)``,
immediates ``("imm", v)``, addresses ``("addr", base, offset)`` and the tensor operand
``[tensorMap, {c0, ...}]`` as ``("tensor", base, [coordinates])``.  An ``opcodes.Instr``
must carry its tensor operand in that shape (program.Program.operand does not parse
``[a, {b}]`` yet: the glue's part).  ``BulkForm.roles`` names each operand in order
(``dstMem``, ``srcMem``, ``tensorMap``, ``tensorCoords``, ``size``, ``mbar``, ``ctaMask``,
``cachePolicy``, ``N``, ``a``); ``BulkForm.operand(role)`` reads one.
"""

from __future__ import annotations

import dataclasses
import re

from mosaic_async_store.check.ops import immediate, split_operands

__all__ = ["BulkForm", "NotInIsa", "decode_bulk", "parse_operand", "KINDS"]

MBAR, GROUP = "mbarrier::complete_tx::bytes", "bulk_group"
KINDS = ("tensor_load", "tensor_store", "tensor_reduce", "tensor_prefetch", "copy_g2s",
         "copy_s2g", "copy_s2s", "reduce_s2s", "reduce_s2g", "bulk_prefetch", "commit",
         "wait", "prefetch", "prefetch_tensormap")
_DIMS = {f"{n}d": n for n in range(1, 6)}
_RED_OPS = ("and", "or", "xor", "add", "inc", "dec", "min", "max")

# The qualifiers of the ISA that the checker does not model, each with why.
_REFUSED_QUALIFIERS = {
    "im2col": "the im2col load mode (the checker runs the tile mode only)",
    "im2col::w": "the im2col::w load mode (the checker runs the tile mode only)",
    "im2col::w::128": "the im2col::w::128 load mode (the checker runs the tile mode only)",
    "im2col_no_offs": "the im2col_no_offs mode (the checker runs the tile mode only)",
    "tile::gather4": "the gather4 tile mode (rows from a coordinate list: not modelled)",
    "tile::scatter4": "the scatter4 tile mode (rows to a coordinate list: not modelled)",
    "cp_mask": "the byte-masked store (.cp_mask) is not modelled",
    "ignore_oob": "the out-of-bounds-ignoring copy (.ignore_oob) is not modelled",
}

# Each form: its optional qualifier groups (group -> the ISA's values), the operand roles
# before the optional ones, and its optional operands (qualifier that brings each).
_LOAD_MODES_IN = ("tile", "tile::gather4", "im2col", "im2col::w", "im2col::w::128")
_HINT = {"hint": ("L2::cache_hint",)}
_FORMS = {
    # (family, dst, src) -> (kind, required completion, optional groups, roles)
    ("tensor", "shared::cta", "global"): (
        "tensor_load", MBAR, {"mode": _LOAD_MODES_IN, "cta_group": ("cta_group::1",
                                                                 "cta_group::2"), **_HINT},
        ("dstMem", "tensor", "mbar")),
    ("tensor", "shared::cluster", "global"): (
        "tensor_load", MBAR, {"mode": _LOAD_MODES_IN, "multicast": ("multicast::cluster",),
                              "cta_group": ("cta_group::1", "cta_group::2"), **_HINT},
        ("dstMem", "tensor", "mbar")),
    ("tensor", "global", "shared::cta"): (
        "tensor_store", GROUP, {"mode": ("tile", "tile::scatter4", "im2col_no_offs"),
                                **_HINT}, ("tensor", "srcMem")),
    ("reduce.tensor", "global", "shared::cta"): (
        "tensor_reduce", GROUP, {"mode": ("tile", "im2col_no_offs"), **_HINT},
        ("tensor", "srcMem")),
    ("bulk", "shared::cta", "global"): (
        "copy_g2s", MBAR, {"ignore_oob": ("ignore_oob",), **_HINT},
        ("dstMem", "srcMem", "size", "mbar")),
    ("bulk", "shared::cluster", "global"): (
        "copy_g2s", MBAR, {"multicast": ("multicast::cluster",), **_HINT},
        ("dstMem", "srcMem", "size", "mbar")),
    ("bulk", "shared::cluster", "shared::cta"): (
        "copy_s2s", MBAR, {}, ("dstMem", "srcMem", "size", "mbar")),
    ("bulk", "global", "shared::cta"): (
        "copy_s2g", GROUP, {"cp_mask": ("cp_mask",), **_HINT}, ("dstMem", "srcMem", "size")),
    ("reduce", "shared::cluster", "shared::cta"): (
        "reduce_s2s", MBAR, {}, ("dstMem", "srcMem", "size", "mbar")),
    ("reduce", "global", "shared::cta"): (
        "reduce_s2g", GROUP, {**_HINT}, ("dstMem", "srcMem", "size")),
}

# cp.reduce.async.bulk: the .redOp / .type pairs of each destination (PTX ISA 9.7.9.25,
# cp.reduce.async.bulk, its table of valid combinations, as recalled: the stored syntax
# block lists the types of each destination but not the pairs; NOT read from the ISA page).
_BULK_REDUCE_TYPES = {
    "shared::cluster": {"add": ("u32", "s32", "u64"), "min": ("u32", "s32"),
                        "max": ("u32", "s32"), "inc": ("u32",), "dec": ("u32",),
                        "and": ("b32",), "or": ("b32",), "xor": ("b32",)},
    "global": {"add": ("u32", "s32", "u64", "f32", "f64", "f16", "bf16"),
               "min": ("u32", "s32", "u64", "s64", "f16", "bf16"),
               "max": ("u32", "s32", "u64", "s64", "f16", "bf16"),
               "inc": ("u32",), "dec": ("u32",), "and": ("b32", "b64"),
               "or": ("b32", "b64"), "xor": ("b32", "b64")},
}
_TYPES = ("f16", "bf16", "b32", "u32", "s32", "b64", "u64", "s64", "f32", "f64")


class NotInIsa(NotImplementedError):
  """A qualifier, operand count or operand kind that the PTX ISA's grammar has not
  (invalid PTX: ptxas would reject it).  A NotImplementedError, so a kernel with it is
  refused at parse like any form the checker does not run."""


@dataclasses.dataclass(frozen=True)
class BulkForm:
  """One decoded instruction.  ``kind``: one of ``KINDS``; ``dims``: the tensor rank
  (.1d...5d) or None; ``dst`` / ``src``: state spaces; ``completion``: MBAR, GROUP or
  None; ``load_mode``: "tile" for a tensor form (given or by default), else None;
  ``multicast`` (then a ``ctaMask`` operand), ``cache_hint`` (then a ``cachePolicy``
  operand); ``cta_group``: 1 or 2 where a load names ``.cta_group::N``, else None (the
  ISA's default is ``::1``); ``red_op`` / ``red_type`` (``red_type`` None for a tensor reduction: the
  tensor map gives it), ``noftz``; ``read`` (wait_group.read); ``roles`` and ``ops``: the
  operands, named, in order."""

  opcode: str
  kind: str
  dims: int | None = None
  dst: str | None = None
  src: str | None = None
  completion: str | None = None
  load_mode: str | None = None
  multicast: bool = False
  cache_hint: bool = False
  cta_group: int | None = None
  red_op: str | None = None
  red_type: str | None = None
  noftz: bool = False
  read: bool = False
  roles: tuple = ()
  ops: tuple = ()

  def operand(self, role):
    """The operand named ``role`` (KeyError naming the roles when it has none)."""
    if role not in self.roles:
      raise KeyError(f"{self.opcode} has no {role} operand (its operands: {self.roles})")
    return self.ops[self.roles.index(role)]


def parse_operand(tok):
  """One operand's text -> the project's operand tuples (see the module docstring)."""
  tok = tok.strip()
  if tok.startswith("[") and tok.endswith("]") and "{" in tok:
    parts = split_operands(tok[1:-1])
    if len(parts) != 2 or not parts[1].startswith("{") or not parts[1].endswith("}"):
      raise NotInIsa(f"operand {tok!r}: not [tensorMap, {{c0, ...}}]")
    return ("tensor", parse_operand(parts[0]), [parse_operand(c)
                                                for c in split_operands(parts[1][1:-1])])
  if tok.startswith("[") and tok.endswith("]"):
    m = re.fullmatch(r"\[\s*([^+\]]+?)\s*(?:\+\s*(-?\w+))?\s*\]", tok)
    if m is None:
      raise NotInIsa(f"operand {tok!r}: not an address")
    return ("addr", parse_operand(m.group(1)), immediate(m.group(2) or "0"))
  if tok.startswith("{"):
    return ("vec", [parse_operand(t) for t in split_operands(tok[1:-1])])
  if re.fullmatch(r"%[\w.]+", tok):
    return ("reg", tok)
  try:
    return ("imm", immediate(tok))
  except ValueError:
    if re.fullmatch(r"[A-Za-z_$][\w$]*", tok):
      return ("sym", tok)
    raise NotInIsa(f"operand {tok!r}") from None


def _split(text_or_ins):
  """(opcode text, base, qualifiers, parsed operands) of a text or an opcodes.Instr."""
  if isinstance(text_or_ins, str):
    stmt = text_or_ins.strip().rstrip(";").strip()
    stmt = re.sub(r"^@!?%?\w+\s+", "", stmt)   # a guard is the glue's
    opcode, _, rest = stmt.partition(" ")
    base, *mods = opcode.split(".")
    return opcode, base, mods, [parse_operand(t) for t in split_operands(rest)]
  return text_or_ins.opcode, text_or_ins.base, list(text_or_ins.mods), list(text_or_ins.ops)


def _refuse_or_reject(opcode, m, form, allowed):
  if m in _REFUSED_QUALIFIERS and m in allowed:
    raise NotImplementedError(f"opcode {opcode} (qualifier .{m}: "
                              f"{_REFUSED_QUALIFIERS[m]})")
  raise NotInIsa(f"opcode {opcode} (qualifier .{m}: not in the PTX ISA's grammar of {form})")


def _groups(opcode, mods, groups, form):
  """{group: qualifier} of ``mods`` against ``groups``; unknown ones are NotInIsa, the
  ISA's unmodelled ones NotImplementedError, a group twice NotInIsa."""
  seen = {}
  every = {q for vals in groups.values() for q in vals}
  for m in mods:
    group = next((g for g, vals in groups.items() if m in vals), None)
    if group is None:
      _refuse_or_reject(opcode, m, form, every)
    if group in seen:
      raise NotInIsa(f"opcode {opcode} (.{seen[group]} and .{m}: two {group} qualifiers)")
    seen[group] = m
  for m in seen.values():
    if m in _REFUSED_QUALIFIERS:
      _refuse_or_reject(opcode, m, form, every)
  return seen


def _kinds(opcode, roles, ops):
  """Each operand's kind against its role (NotInIsa otherwise)."""
  want = {"dstMem": ("addr",), "srcMem": ("addr",), "mbar": ("addr",), "a": ("addr",),
          "tensor": ("tensor",), "size": ("reg", "imm"), "ctaMask": ("reg", "imm"),
          "cachePolicy": ("reg", "imm"), "N": ("imm",)}
  for role, op in zip(roles, ops):
    if op[0] not in want[role]:
      raise NotInIsa(f"opcode {opcode} (operand {role} is {op[0]}: the ISA wants "
                     f"{' or '.join(want[role])})")


def _with_operands(opcode, kind, roles, ops, optional, **fields):
  """The BulkForm, its operand count and kinds checked; ``optional``: the roles the
  qualifiers add after ``roles``."""
  roles = tuple(roles) + tuple(optional)
  if len(ops) != len(roles):
    raise NotInIsa(f"opcode {opcode} ({len(ops)} operands; this form takes {len(roles)}: "
                   f"{', '.join(roles)})")
  _kinds(opcode, roles, ops)
  flat_roles, flat_ops = [], []
  for role, op in zip(roles, ops):
    if role == "tensor":
      dims = fields.get("dims")
      if len(op[2]) != dims:
        raise NotInIsa(f"opcode {opcode} ({len(op[2])} tensor coordinates for .{dims}d)")
      flat_roles += ["tensorMap", "tensorCoords"]
      flat_ops += [op[1], tuple(op[2])]
    else:
      flat_roles.append(role)
      flat_ops.append(op)
  return BulkForm(opcode, kind, roles=tuple(flat_roles), ops=tuple(flat_ops), **fields)


def _tensor_dims(opcode, mods):
  """(whether it is a .tensor form, its rank or None, the qualifiers after them)."""
  if mods[:1] != ["tensor"]:
    return False, None, mods
  if len(mods) < 2 or mods[1] not in _DIMS:
    raise NotInIsa(f"opcode {opcode} (.tensor needs .1d ... .5d next)")
  return True, _DIMS[mods[1]], mods[2:]


def _copy(opcode, mods, ops, reduce):
  """cp{.reduce}.async.bulk{.tensor.dim}.dst.src...: the copies and reductions."""
  tensor, dims, mods = _tensor_dims(opcode, mods)
  if len(mods) < 2:
    raise NotInIsa(f"opcode {opcode} (no .dst.src state spaces)")
  dst, src, rest = mods[0], mods[1], mods[2:]
  family = ("reduce." if reduce else "") + ("tensor" if tensor else "bulk")
  family = "reduce" if family == "reduce.bulk" else family
  key = (family, dst, src)
  if key not in _FORMS:
    raise NotInIsa(f"opcode {opcode} (.{dst}.{src}: no such form of "
                   f"cp{'.reduce' if reduce else ''}.async.bulk{'.tensor' if tensor else ''})")
  kind, completion, groups, roles = _FORMS[key]
  groups = {"completion": (completion,), **groups}
  red_op = red_type = None
  noftz = False
  if reduce:   # .redOp (and for the non-tensor forms .noftz and .type) among the rest
    ops_named = [m for m in rest if m in _RED_OPS]
    if len(ops_named) != 1:
      raise NotInIsa(f"opcode {opcode} (a reduction names exactly one .redOp)")
    red_op = ops_named[0]
    rest = [m for m in rest if m != red_op]
    if not tensor:
      types = [m for m in rest if m in _TYPES]
      if len(types) != 1:
        raise NotInIsa(f"opcode {opcode} (cp.reduce.async.bulk names exactly one .type)")
      red_type, noftz = types[0], "noftz" in rest
      rest = [m for m in rest if m not in (red_type, "noftz")]
      if noftz and (red_op, dst) != ("add", "global") or \
         red_type in ("f16", "bf16") and red_op == "add" and not noftz:
        raise NotInIsa(f"opcode {opcode} (.noftz goes with .add of .f16 / .bf16 into "
                       ".global, and those need it)")
      if red_type not in _BULK_REDUCE_TYPES[dst].get(red_op, ()):
        raise NotInIsa(f"opcode {opcode} (.{red_op}.{red_type} into .{dst}: not a valid "
                       "combination)")
  seen = _groups(opcode, rest, groups, f"cp{'.reduce' if reduce else ''}.async.bulk"
                 f"{'.tensor' if tensor else ''}.{dst}.{src}")
  if "completion" not in seen:
    raise NotInIsa(f"opcode {opcode} (no completion mechanism: this form takes "
                   f".{completion})")
  multicast, hint = "multicast" in seen, "hint" in seen
  group = seen.get("cta_group")
  if group == "cta_group::2" and multicast:
    raise NotImplementedError(f"opcode {opcode} (.multicast::cluster with .cta_group::2: "
                              "which CTA's mbarrier each destination signals is not "
                              "modelled)")
  optional = (("ctaMask",) if multicast else ()) + (("cachePolicy",) if hint else ())
  return _with_operands(opcode, kind, roles, ops, optional, dims=dims, dst=dst, src=src,
                        completion=completion, load_mode="tile" if tensor else None,
                        multicast=multicast, cache_hint=hint,
                        cta_group=None if group is None else int(group[-1]), red_op=red_op,
                        red_type=red_type, noftz=noftz)


def _prefetch_bulk(opcode, mods, ops):
  """cp.async.bulk.prefetch{.tensor.dim}.L2.global...: L2 prefetches (no effect)."""
  tensor, dims, mods = _tensor_dims(opcode, mods)
  if mods[:2] != ["L2", "global"]:
    raise NotInIsa(f"opcode {opcode} (a bulk prefetch is .L2.global)")
  groups = {**_HINT, **({"mode": _LOAD_MODES_IN} if tensor else {})}
  seen = _groups(opcode, mods[2:], groups, "cp.async.bulk.prefetch")
  hint = "hint" in seen
  roles = ("tensor",) if tensor else ("srcMem", "size")
  return _with_operands(opcode, "tensor_prefetch" if tensor else "bulk_prefetch", roles,
                        ops, ("cachePolicy",) if hint else (), dims=dims, src="global",
                        load_mode="tile" if tensor else None, cache_hint=hint)


def _prefetch(opcode, mods, ops):
  """prefetch{.space}.level / .L2::evict_* / {.const, .param}.tensormap: hints only."""
  if mods and mods[-1] == "tensormap":
    if mods[:-1] not in ([], ["const"], ["param"]):
      raise NotInIsa(f"opcode {opcode} (prefetch.tensormap takes .const, .param or no "
                     "state space)")
    return _with_operands(opcode, "prefetch_tensormap", ("a",), ops, (),
                          src=mods[0] if len(mods) == 2 else None)
  if mods in ([l] for l in ("L1", "L2")) or \
     mods in ([s, l] for s in ("global", "local") for l in ("L1", "L2")) or \
     mods in (["global", e] for e in ("L2::evict_last", "L2::evict_normal")):
    return _with_operands(opcode, "prefetch", ("a",), ops, (),
                          src=mods[0] if len(mods) == 2 else None)
  raise NotInIsa(f"opcode {opcode} (not a form of prefetch in the PTX ISA)")


def decode_bulk(text_or_ins) -> BulkForm:
  """The ``BulkForm`` of a statement's text (a guard is ignored) or of an
  ``opcodes.Instr``; NotImplementedError naming the qualifier for a form of the ISA the
  checker does not run, ``NotInIsa`` for anything the ISA's grammar has not."""
  opcode, base, mods, ops = _split(text_or_ins)
  if base == "prefetch":
    return _prefetch(opcode, mods, ops)
  if base != "cp":
    raise NotInIsa(f"opcode {opcode} (not a bulk copy)")
  if mods[:2] == ["async", "bulk"]:
    rest = mods[2:]
    if rest == ["commit_group"]:
      return _with_operands(opcode, "commit", (), ops, ())
    if rest[:1] == ["wait_group"]:
      if rest[1:] not in ([], ["read"]):
        raise NotInIsa(f"opcode {opcode} (cp.async.bulk.wait_group takes .read only)")
      return _with_operands(opcode, "wait", ("N",), ops, (), read=rest[1:] == ["read"])
    if rest[:1] == ["prefetch"]:
      return _prefetch_bulk(opcode, rest[1:], ops)
    return _copy(opcode, rest, ops, reduce=False)
  if mods[:3] == ["reduce", "async", "bulk"]:
    return _copy(opcode, mods[3:], ops, reduce=True)
  if mods[:1] == ["async"]:
    raise NotImplementedError(f"opcode {opcode} (the non-bulk cp.async of sm_80 is not "
                              "one the checker runs)")
  raise NotInIsa(f"opcode {opcode} (not a form of cp in the PTX ISA)")
