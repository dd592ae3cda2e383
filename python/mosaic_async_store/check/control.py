"""Control and hint opcodes of the PTX checker: ``exit`` / ``ret``, ``call`` (the
kernel's vprintf failure report, logged in ``Machine.calls``), ``nanosleep`` (a
poll's pause: the thread yields), and ``bra`` (resolved by the parser, ``program``; listed here for the table).
"""

from __future__ import annotations

from mosaic_async_store.check import warp
from mosaic_async_store.check.family import Family
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.outcomes import EXIT, YIELD

__all__ = ["OPCODES", "FAMILY"]


def _exit(k, ins):
  """``exit``, ``ret`` (``ret.uni``: the same for the one function the checker runs)."""
  if ins.mods not in ([], ["uni"] if ins.base == "ret" else []) or ins.ops:
    raise NotImplementedError(f"opcode {ins.opcode}")
  return lambda th: EXIT


def _call(k, ins):
  """A call of ``vprintf`` (the kernel's failure report) is logged in ``k.calls``, not
  run; a call of any other function is refused (the checker runs one function)."""
  callee = ins.ops[0][1]
  if ins.mods not in ([], ["uni"]) or callee != "vprintf":
    raise NotImplementedError(f"opcode {ins.opcode} of {callee} (the checker runs no "
                              "function calls; it logs calls of vprintf, the kernel's "
                              "failure report)")
  return lambda th: k.calls.append((th.cta, th.tid, ins.opcode))


def _setmaxnreg(k, ins):
  """``setmaxnreg.{inc,dec}.sync.aligned.u32 N`` (PTX ISA, setmaxnreg): a hint to the
  register allocator with no memory effect; "imm-reg-count" is "in the range 24 to 256
  (both inclusive)" and "a multiple of 8".  ``.aligned``: every lane of the warp
  executes it together (``warp.aligned_collective``; a lane elsewhere is
  ``aligned-divergence``).  That all four warps of the warpgroup execute it is not
  checked."""
  if ins.mods not in (["inc", "sync", "aligned", "u32"], ["dec", "sync", "aligned", "u32"]) \
     or len(ins.ops) != 1 or ins.ops[0][0] != "imm":
    raise NotImplementedError(f"opcode {ins.opcode} (setmaxnreg.{{inc,dec}}.sync.aligned.u32 "
                              "with an immediate count)")
  count = ins.ops[0][1]
  if not 24 <= count <= 256 or count % 8:
    raise NotImplementedError(f"opcode {ins.opcode} {count} (not PTX: the register count "
                              "is a multiple of 8 from 24 to 256)")
  return warp.aligned_collective(k, lambda lanes: None, goes_on=True)


def _nanosleep(k, ins):
  """A hint: let the other threads run (a poll loop's pause: see run.py)."""
  if ins.mods != ["u32"] or len(ins.ops) != 1:
    raise NotImplementedError(f"opcode {ins.opcode}")
  def nanosleep(th):
    th.polled = True
    return YIELD
  return nanosleep


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/checker/test_opcode_table.py compiles every one).
OPCODES = {
    "setmaxnreg": Opcode(_setmaxnreg, ("setmaxnreg.dec.sync.aligned.u32 40",
                                       "setmaxnreg.inc.sync.aligned.u32 232"),
                         ("setmaxnreg.inc.sync.aligned.u32 20", "setmaxnreg.dec.u32 40")),
    "nanosleep": Opcode(_nanosleep, ("nanosleep.u32 20",), ("nanosleep.u64 %rd1",)),
    "bra": Opcode(None, ("bra L", "@%p1 bra.uni L")),
    "ret": Opcode(_exit, ("ret", "ret.uni")),
    "exit": Opcode(_exit, ("exit",), ("exit.foo",)),
    "call": Opcode(_call, ("call.uni (retval0), vprintf, (param0, param1)",),
                   ("call.uni (retval0), helper, (param0, param1)", "call.foo vprintf")),
}

FAMILY = Family("control", OPCODES)
