"""A PTX interpreter and protocol checker that runs one cluster on the CPU:
``PtxKernel(ptx).launch(buffers, cluster=..., smem_bytes=...)``.

Scope: the PTX subset of the project's full (non-bare) store kernels and of the
Pallas runtime kernels on sm_90a: integer ALU, predicates, global/shared/local
loads and stores (also generic ones, without a state space), ``mapa``,
``st.async`` / ``red.async`` with ``complete_tx``, plain ``st`` / ``red`` into
``.shared::cluster``, mbarriers, warp collectives and CTA / cluster barriers, with
the float arithmetic of ``floats``.  The opcode tables (``opcodes.OPCODES``, one
per family module) say which handler compiles each base opcode; any other opcode,
or a qualifier a handler does not implement, raises NotImplementedError (naming
it) when the kernel is parsed: nothing is skipped silently.

How it is built (docs/architecture.md, "The checker's machine"):
  * ``machine.Machine``: the state of a run (threads, memories and their
    shadows, barriers, asynchronous operations in flight, clocks, the schedule);
  * ``program.Program``: the PTX parsed and compiled against the machine, each
    instruction by the handler of its family module (``opcodes.FAMILIES``);
  * ``run``: the scheduler; ``asyncops``: asynchronous operations with their
    completions; ``memory`` / ``global_memory``: the memory model.

Model:
  * each thread of each CTA has its own registers and memory-model state; the
    converged lanes of a warp run each instruction together (``lockstep.run_piece``:
    through the instruction's warp form, ``Program.vcode``, where it has one, else
    lane by lane), until each reaches a synchronising instruction (warp
    collective, ``bar.sync``, ``barrier.cluster.wait``, an unfinished
    ``mbarrier.try_wait``), or, under a seeded schedule, pauses after an arrive or
    an asynchronous store; divergent lanes split and merge again where their
    program counters meet; the scheduler picks the next piece and releases the
    participants once a synchronisation can complete;
  * asynchronous operations (``st.async`` / ``red.async``) and their completions
    land when the schedule says, in any order (``schedule.Schedule``); memory
    ordering is checked by vector clocks with scopes, per byte of shared and
    global memory (``memory``, ``global_memory``), and every violated rule is a
    ``findings.Finding`` (the run goes on after a race; a fault or a hang ends it);
  * ``mbarrier.test_wait`` / ``try_wait`` may return false, and the checker lets
    them (sync.py, ``_wait``): the first try of a wait the thread could have run
    before the phase completed returns false; ``try_wait`` retried on an
    unfinished phase blocks, and returns false (the hardware time limit
    expiring) only when no thread can make progress any more;
  * addresses: ``addresses`` (the shared, global and local windows, ``mapa``'s
    cluster addresses, bounds and alignment);
  * parameters: a NumPy argument is one pointer; ``Memref(array)`` is a memref
    descriptor (Mosaic's kernels), 3 + 2 * ndim parameters
    (``machine.Machine.pack_params``).
"""

from __future__ import annotations

from typing import NamedTuple

from mosaic_async_store.check import run
from mosaic_async_store.check.machine import Machine, Memref
from mosaic_async_store.check.program import Program

__all__ = ["PtxKernel", "Memref", "Launched"]


class Launched(NamedTuple):
  """What ``PtxKernel.launch`` gives: ``outputs``, the buffers' contents after the run
  (uint8 arrays, in argument order; None where a finding was made), and ``findings``,
  every broken rule the run found (``findings.Finding``), in order."""

  outputs: list | None
  findings: tuple


class PtxKernel:
  """A kernel's PTX, ready to run: ``PtxKernel(ptx_text).launch(buffers, cluster=...,
  smem_bytes=...)``.  ``machine`` is its state (after a launch: that run's), and
  ``program`` its compiled instructions."""

  def __init__(self, text: str):
    self.machine = Machine()
    self.program = Program(text, self.machine)

  def launch(self, buffers, **kwargs) -> Launched:
    """Runs one cluster (``run.launch``'s arguments: cluster, smem_bytes, block,
    schedule, ...) and returns its outputs and findings (``Launched``); a broken rule is
    never raised."""
    out = run.launch(self.machine, buffers, **kwargs)
    return Launched(out, tuple(self.machine.findings))

  # What tests, tools and reports read of a kernel and of its last run.
  code = property(lambda self: self.program.code)
  texts = property(lambda self: self.program.texts)
  lines = property(lambda self: self.program.lines)
  sources = property(lambda self: self.program.sources)
  params = property(lambda self: self.program.params)
  executed = property(lambda self: self.machine.executed,
                      doc="thread-instructions run by the last launch")
  findings = property(lambda self: tuple(self.machine.findings),
                      doc="the last launch's findings (findings.Finding), in order")
  calls = property(lambda self: self.machine.calls,
                   doc="(CTA, thread, opcode) of each call the last launch made")
  timeouts = property(lambda self: self.machine.timeouts,
                      doc="mbarrier waits that timed out in the last launch")
  store_trace = property(lambda self: self.machine.store_trace,
                         doc="launch(trace_stores=True)'s stores into SMEM (run.launch)")

  def source_at(self, ptx_line):
    """The source of the (first) instruction at PTX line ``ptx_line``, or None."""
    return self.program.source_at(ptx_line)
