"""What an instruction's function returns to the scheduler (``run``), besides None
(go on to the next instruction) and an int (jump to that instruction).  A warp form
(``program.Program.vcode``: one call for all the lanes of a piece) returns None, an
int (every lane jumps there), ``FALLBACK``, or {lane: YIELD} for the lanes that yield
(the others go on)."""

__all__ = ["BLOCK", "YIELD", "EXIT", "FALLBACK"]

BLOCK = object()   # this thread waits (``Thread.wait`` says for what) for the scheduler
YIELD = object()   # done, but let other threads run first (a poll, a schedule's pause)
EXIT = object()    # this thread stops
FALLBACK = object()   # (a warp form, ``Program.vcode``) nothing done: run it lane by lane
