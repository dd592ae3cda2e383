"""What an instruction's function returns to the scheduler (``run``), besides None
(go on to the next instruction) and an int (jump to that instruction).  A warp form
(``program.Program.vcode``: one call for all the lanes of a piece) returns None, an
int (every lane jumps there), ``FALLBACK``, ``YIELD`` (every lane yields), or
{lane: YIELD or BLOCK} for the lanes that yield or block (the others go on); a lane
it blocks, the form has made waiting itself (its program counter, state "block",
``waits.block``), as ``lockstep`` does for a lane-by-lane BLOCK.  Lanes of the piece's
warp that the instruction resumed rejoin it."""

__all__ = ["BLOCK", "YIELD", "EXIT", "FALLBACK"]

BLOCK = object()   # this thread waits (``Thread.wait`` says for what) for the scheduler
YIELD = object()   # done, but let other threads run first (a poll, a schedule's pause)
EXIT = object()    # this thread stops
FALLBACK = object()   # (a warp form, ``Program.vcode``) nothing done: run it lane by lane
