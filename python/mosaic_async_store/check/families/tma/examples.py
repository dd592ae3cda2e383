"""The statements the bulk-copy grammar (``tma_forms.decode_bulk``) is held to, as data.

Three tables of PTX statements, over test_opcode_table's registers: ``EXAMPLES``, one or
more of each form the grammar decodes (the forms Mosaic GPU emits among them);
``REFUSED``, forms the PTX ISA has and the checker does not run, which ``decode_bulk``
refuses by name (NotImplementedError, not ``NotInIsa``); ``NOT_IN_ISA``, statements the
ISA's grammar has not (``NotInIsa``).  test/checker/test_tma_forms.py walks all three.

Apart from ``tma_forms`` because they are the grammar's test corpus, not its rules: the
decoder reads none of them, and a new form or a new refusal adds a line here without
touching the decoder's tables.
"""

from __future__ import annotations

__all__ = ["EXAMPLES", "REFUSED", "NOT_IN_ISA"]

EXAMPLES = (
    "cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes "
    "[%r1], [%rd1, {%r2, %r3}], [%r4]",
    "cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
    "[%r1], [%rd1, {%r2}], [%r4]",
    "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes"
    ".multicast::cluster [%r5], [%rd1, {%r6}], [%r2], %h1",
    "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    ".multicast::cluster.L2::cache_hint [%r1], [%rd1, {%r2, %r3, %r4, %r5, %r6}], [%r7], "
    "%h1, %rd2",
    "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    ".cta_group::2 [%r1], [%rd1, {%r2, %r3}], [%r4]",
    "cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes"
    ".cta_group::2 [%r1], [%rd1, {%r2, %r3, %r4, %r5}], [%r6]",
    "cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes.cta_group::1 "
    "[%r1], [%rd1, {%r2, %r3}], [%r4]",
    "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r31, %r32} ], [%r30]",
    "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group.L2::cache_hint "
    "[%rd1, {%r1, %r2, %r3}], [%r4], %rd2",
    "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group "
    "[%rd1,{%r2,%r3}], [%r1]",
    "cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [%r1], [%rd1], %r2, [%r3]",
    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
    "[%r1], [%rd1], 256, [%r3], %h2",
    "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes "
    "[%r1], [%r2], %r3, [%r4]",
    "cp.async.bulk.global.shared::cta.bulk_group [%rd13], [%rd14], %r60",
    "cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%rd1], [%r1], 64, %rd2",
    "cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.add.u32 "
    "[%r1], [%r2], %r3, [%r4]",
    "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.f16 [%rd1], [%r1], %r2",
    "cp.reduce.async.bulk.global.shared::cta.bulk_group.L2::cache_hint.min.s64 "
    "[%rd1], [%r1], 32, %rd3",
    "cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%rd1, {%r1, %r2}]",
    "cp.async.bulk.prefetch.L2.global [%rd1], %r1",
    "cp.async.bulk.commit_group",
    "cp.async.bulk.wait_group 0",
    "cp.async.bulk.wait_group.read 1",
    "prefetch.tensormap [%rd1]",
    "prefetch.param.tensormap [%rd1]",
    "prefetch.global.L2 [%rd1]",
    "prefetch.global.L2::evict_last [%rd1]",
)
REFUSED = (
    "cp.async.bulk.tensor.4d.shared::cta.global.im2col.mbarrier::complete_tx::bytes "
    "[%r1], [%rd1, {%r2, %r3, %r4, %r5}], [%r6], {%h1, %h2}",
    "cp.async.bulk.tensor.2d.shared::cta.global.tile::gather4.mbarrier::complete_tx::bytes "
    "[%r1], [%rd1, {%r2, %r3, %r4, %r5, %r6}], [%r7]",
    "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
    ".multicast::cluster.cta_group::2 [%r1], [%rd1, {%r2, %r3}], [%r4], %h1",
    "cp.async.bulk.tensor.2d.global.shared::cta.tile::scatter4.bulk_group "
    "[%rd1, {%r2, %r3, %r4, %r5, %r6}], [%r1]",
    "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.im2col_no_offs.bulk_group "
    "[%rd1, {%r1, %r2, %r3}], [%r4]",
    "cp.async.bulk.global.shared::cta.bulk_group.cp_mask [%rd1], [%r1], 64, %h1",
    "cp.async.ca.shared.global [%r1], [%rd1], 16",
)
NOT_IN_ISA = (
    "cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes"
    ".multicast::cluster [%r1], [%rd1, {%r2, %r3}], [%r4], %h1",
    "cp.async.bulk.tensor.6d.shared::cta.global.mbarrier::complete_tx::bytes "
    "[%r1], [%rd1, {%r2}], [%r4]",
    "cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes "
    "[%r1], [%rd1, {%r2}], [%r4]",
    "cp.async.bulk.tensor.2d.shared::cta.global.bulk_group [%r1], [%rd1, {%r2, %r3}], [%r4]",
    "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint "
    "[%rd1, {%r1, %r2}], [%r4]",
    "cp.async.bulk.global.shared::cta.bulk_group.tile [%rd1], [%r1], 64",
    "cp.async.bulk.shared::cta.shared::cta.mbarrier::complete_tx::bytes "
    "[%r1], [%r2], 16, [%r3]",
    "cp.async.bulk.global.shared::cta.bulk_group.bulk_group [%rd1], [%r1], 64",
    "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f16 [%rd1], [%r1], 32",
    "cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.add.f32 "
    "[%r1], [%r2], %r3, [%r4]",
    "cp.async.bulk.wait_group.acquire 0",
    "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.cta_group::2 "
    "[%rd1, {%r1, %r2}], [%r4]",
    "cp.async.bulk.wait_group %r1",
    "prefetch.global.tensormap [%rd1]",
)
