"""What an instruction's function returns to the scheduler (``run``), besides None
(go on to the next instruction) and an int (jump to that instruction)."""

__all__ = ["BLOCK", "YIELD", "EXIT"]

BLOCK = object()   # this thread waits (``Thread.wait`` says for what) for the scheduler
YIELD = object()   # done, but let other threads run first (a poll, a schedule's pause)
EXIT = object()    # this thread stops
