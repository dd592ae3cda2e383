"""Family: tcgen05, Blackwell's fifth-generation tensor core (PTX ISA 9.7.16): tensor
memory and its allocation, ``tcgen05.ld`` / ``st`` / ``wait``, the fences, and (where
they are run) ``tcgen05.mma``, ``tcgen05.cp`` and ``tcgen05.commit``.

Modules: ``state`` (each CTA's tensor memory, who knows which of its accesses),
``alloc`` (``alloc`` / ``dealloc`` / ``relinquish_alloc_permit``, and what must be freed
when a CTA exits), ``ldst`` (loads, stores, waits, fences), ``descriptors`` (the
instruction descriptor and the sm_100 shared-memory descriptor), ``mma``
(``tcgen05.mma``), ``cp`` (``tcgen05.cp``), ``commit`` (``tcgen05.commit``), ``pair``
(the CTA pair of ``.cta_group::2``: the peer, even and odd), ``table`` (the opcode
table: one base opcode, ``tcgen05``, dispatched on its first qualifier).
"""

from mosaic_async_store.check.families.tcgen05 import alloc, ldst, state, table
from mosaic_async_store.check.family import Family

__all__ = ["FAMILY"]

FAMILY = Family(
    "tcgen05", table.OPCODES, rules={**alloc.RULES, **ldst.RULES, **table.RULES},
    warnings={**alloc.WARNINGS, **ldst.WARNINGS, **table.WARNINGS},
    state={"tcgen05": table.fresh_state}, at_cta_exit=alloc.at_cta_exit,
    known_at_exit=state.known_at_exit,
    memory_spaces=("tensor memory",), arch="sm_100a",
    completion_groups=("tcgen05 commit",))
