"""The interpreter's parsing features, on tiny hand-written PTX kernels.

* generic ``ld`` / ``st`` (no state space): the space comes from the address at
  run time, and generic shared accesses take the ``.shared`` path;
* registers declared without ``%`` (upstream's inline asm: ``.reg .pred P1;``);
* Mosaic's memref-descriptor parameters (``Memref(array)``: 3 + 2 * ndim).
"""


import numpy as np
import pytest

from mosaic_async_store.check.interp import Memref, PtxKernel
from ptx_harness import kernel, launch, outputs


# -- generic addresses -----------------------------------------------------------


def test_generic_global_loads_and_stores():
  """``ld.v2.b32`` / ``st.v2.b32`` / ``ld.u32`` / ``st.u32`` on a global address."""
  ptx = kernel("""
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 8;
  add.s64 %rd3, %rd1, %rd2;
  ld.v2.b32 {%r3, %r4}, [%rd3];
  add.s32 %r4, %r4, 100;
  st.v2.b32 [%rd3], {%r4, %r3};
  ld.u32 %r5, [%rd3+4];
  add.s32 %r5, %r5, 1;
  st.u32 [%rd3+4], %r5;
""")
  x = np.arange(2 * 4, dtype=np.int32)
  [out] = outputs(ptx, [x], cluster=1, smem_bytes=16, block=4)
  pairs = x.reshape(4, 2)
  want = np.stack([pairs[:, 1] + 100, pairs[:, 0] + 1], axis=1).reshape(-1)
  assert np.array_equal(out.view(np.int32), want)


def test_generic_shared_and_cluster_addresses():
  """Generic st into the own shared window, generic ld from the peer's (a mapa'd
  address) after a cluster barrier: the bytes each CTA wrote reach the other."""
  ptx = kernel("""
  ld.param.u64 %rd1, [k_param_0];
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  shl.b32 %r4, %r1, 2;
  add.s32 %r5, %r3, %r4;
  cvt.u64.u32 %rd3, %r5;
  mad.lo.s32 %r6, %r2, 1000, %r1;
  st.u32 [%rd3], %r6;
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  xor.b32 %r7, %r2, 1;
  mapa.shared::cluster.u32 %r8, %r5, %r7;
  cvt.u64.u32 %rd4, %r8;
  ld.u32 %r9, [%rd4];
  shl.b32 %r10, %r2, 2;
  add.s32 %r10, %r10, %r1;
  mul.wide.u32 %rd5, %r10, 4;
  add.s64 %rd6, %rd1, %rd5;
  st.u32 [%rd6], %r9;
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
""")
  out0 = np.full(2 * 4, -1, np.int32)
  [out] = outputs(ptx, [out0], cluster=2, smem_bytes=16, block=4)
  # CTA c reads what CTA 1 - c wrote: (1 - c) * 1000 + t
  assert out.view(np.int32).tolist() == [1000, 1001, 1002, 1003, 0, 1, 2, 3]


# Each snippet runs spelled with ``.shared`` and generically: a generic shared
# access must behave exactly like the ``.shared`` one (same path, same checks).
SHARED_SNIPPETS = {
    "ok": ("add.s32 %r5, %r3, %r4;", "st{sp}.u32 [%rd3], %r1;"),
    "misaligned": ("add.s32 %r5, %r3, 2;", "st{sp}.u32 [%rd3], %r1;"),
    "out_of_bounds": ("add.s32 %r5, %r3, 64;", "ld{sp}.u32 %r6, [%rd3];"),
    "same_word_from_two_threads": ("mov.b32 %r5, %r3;", "st{sp}.u32 [%rd3], %r1;"),
}


def _outcome(ptx):
  """("ok", "") or, where the run found a broken rule, the first finding's rule and its
  explained message past "at `instruction` (PTX line N): " (the instruction spelled
  without ``.shared``); or the name and text of what the launch raised."""
  try:
    _, found = launch(ptx, [np.zeros(4, np.int32)], cluster=1, smem_bytes=16, block=4)
  except Exception as e:  # noqa: BLE001  (the outcome is what is compared)
    return type(e).__name__, str(e).split(": ", 1)[-1].replace(".shared", "")
  if found:
    return found[0].rule, found[0].explained.split(": ", 1)[-1].replace(".shared", "")
  return "ok", ""


@pytest.mark.parametrize("name", SHARED_SNIPPETS)
def test_generic_shared_access_behaves_like_shared(name):
  addr, access = SHARED_SNIPPETS[name]
  body = f"""
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  shl.b32 %r4, %r1, 2;
  {addr}
  cvt.u64.u32 %rd3, %r5;
  {{access}}
"""
  shared = _outcome(kernel(body.format(access=access.format(sp=".shared"))))
  generic = _outcome(kernel(body.format(access=access.format(sp=""))))
  assert shared == generic
  if name in ("misaligned", "out_of_bounds"):
    assert shared[0] == "fault" and "[fault:" in shared[1]
    assert name.split("_")[0] in shared[1]


def test_const_space_is_refused_at_parse_time():
  with pytest.raises(NotImplementedError, match=r"ld\.const\.u32"):
    PtxKernel(kernel("  ld.const.u32 %r3, [%rd1];"))


# -- bare register names ------------------------------------------------------------


def test_bare_registers_of_inline_asm_blocks():
  """Upstream's wait declares ``.reg .pred P1;`` and branches on ``@P1``; two
  blocks may each declare their own P1, and a bare b32 register works too."""
  ptx = kernel("""
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  mov.b32 %r3, 0;
  {
  .reg .pred P1;
  .reg .b32 tmp;
  setp.eq.u32 P1, %r1, 2;
  @P1 bra.uni DONE;
  mov.b32 tmp, 10;
  add.s32 %r3, %r3, tmp;
  DONE:
  }
  {
  .reg .pred P1;
  setp.lt.u32 P1, %r1, 1;
  @!P1 bra.uni DONE;
  add.s32 %r3, %r3, 1000;
  DONE:
  }
  st.global.u32 [%rd3], %r3;
""")
  [out] = outputs(ptx, [np.zeros(4, np.int32)], cluster=1, smem_bytes=16, block=4)
  assert out.view(np.int32).tolist() == [1010, 10, 0, 10]


def test_top_level_bare_register():
  ptx = kernel("""
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  setp.ne.u32 Q, %r1, 0;
  mov.b32 %r3, 5;
  @Q mov.b32 %r3, 7;
  st.global.u32 [%rd3], %r3;
""", regs=".reg .pred Q;")
  [out] = outputs(ptx, [np.zeros(2, np.int32)], cluster=1, smem_bytes=16, block=2)
  assert out.view(np.int32).tolist() == [5, 7]


def test_undeclared_bare_names_are_refused():
  with pytest.raises(NotImplementedError, match="@P9"):
    PtxKernel(kernel("  @P9 bra.uni L;\n  L:"))
  with pytest.raises(NotImplementedError, match="operand 'P9'"):   # no register, symbol
    PtxKernel(kernel("  mov.b32 %r3, P9;"))                          # or immediate


def test_unknown_opcode_is_still_refused():
  with pytest.raises(NotImplementedError, match="popc"):
    PtxKernel(kernel("  { .reg .b32 t; popc.b32 t, %r1; }"))


# -- memref descriptors --------------------------------------------------------------


MEMREF_BODY = """
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra.uni END;
  ld.param.u64 %rd20, [k_param_7];
  ld.param.u64 %rd1, [k_param_0];
  st.global.u64 [%rd20], %rd1;
  ld.param.u64 %rd1, [k_param_1];
  st.global.u64 [%rd20+8], %rd1;
  ld.param.u64 %rd2, [k_param_2];
  st.global.u64 [%rd20+16], %rd2;
  ld.param.u64 %rd3, [k_param_3];
  st.global.u64 [%rd20+24], %rd3;
  ld.param.u64 %rd4, [k_param_4];
  st.global.u64 [%rd20+32], %rd4;
  ld.param.u64 %rd5, [k_param_5];
  st.global.u64 [%rd20+40], %rd5;
  ld.param.u64 %rd6, [k_param_6];
  st.global.u64 [%rd20+48], %rd6;
  mul.lo.s64 %rd7, %rd5, 2;
  mad.lo.s64 %rd7, %rd6, 3, %rd7;
  add.s64 %rd7, %rd7, %rd2;
  shl.b64 %rd7, %rd7, 2;
  add.s64 %rd8, %rd1, %rd7;
  ld.global.u32 %r3, [%rd8];
  st.global.u32 [%rd20+56], %r3;
  END:
"""


def test_memref_descriptor_parameters():
  """Memref(a) of a (3, 4) array: allocated and aligned pointer (buffer 0 at
  1 << 40), offset 0, sizes (3, 4), strides (4, 1); a plain array: one pointer.
  The kernel reads a[2, 3] through the descriptor's strides."""
  a = np.arange(12, dtype=np.int32).reshape(3, 4)
  ptx = kernel(MEMREF_BODY, nparams=8)
  got_a, out = outputs(ptx, [Memref(a), np.zeros(8, np.int64)], cluster=1, smem_bytes=16,
                       block=2)
  words = out.view(np.int64)
  assert words[:7].tolist() == [1 << 40, 1 << 40, 0, 3, 4, 4, 1]
  assert int(words[7]) & 0xFFFFFFFF == a[2, 3]
  assert np.array_equal(got_a.view(np.int32).reshape(3, 4), a)  # argument order kept


def test_memref_parameter_count_is_checked():
  ptx = kernel(MEMREF_BODY, nparams=8)
  with pytest.raises(ValueError, match=r"takes 8 parameters, the arguments make 2 .*"
                                       r"array: 1, array: 1.*3 \+ 2 \* ndim per Memref"):
    launch(ptx, [np.zeros(3), np.zeros(8)], cluster=1, smem_bytes=16)
  with pytest.raises(ValueError, match=r"make 10 \(Memref\(2, 3, 1\): 9, array: 1\)"):
    launch(ptx, [Memref(np.zeros((2, 3, 1))), np.zeros(8)], cluster=1, smem_bytes=16)


# -- ldmatrix (jax 0.11's loads from swizzled SMEM use it) ----------------------------


LDMATRIX_BODY = """
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd2, [k_param_1];
  mul.wide.u32 %rd3, %r1, 16;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.v4.u32 {{%r10, %r11, %r12, %r13}}, [%rd4];
  mov.b64 %rd5, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd5;
  shl.b32 %r4, %r1, 4;
  add.s32 %r4, %r3, %r4;
  st.shared.v4.b32 [%r4], {{%r10, %r11, %r12, %r13}};
  bar.sync 0;
  ldmatrix.sync.aligned.m8n8.{shape}.shared.b16 {dests}, [%r4];
  add.s64 %rd6, %rd2, %rd3;
  st.global.v4.b32 [%rd6], {{%r20, %r21, %r22, %r23}};
"""


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_fragments(n, trans):
  """Lane 8i + j points at row j of matrix i (here lane t's row is at 16 t); register
  ri of lane l gets row l // 4, columns 2 (l % 4) and +1 of matrix i (PTX ISA,
  ldmatrix fragment layout), or of the transposed matrix with .trans."""
  mats = np.arange(1, 4 * 64 + 1, dtype=np.uint16).reshape(4, 8, 8)  # [matrix, row, col]
  dests = "{" + ", ".join(f"%r{20 + i}" for i in range(n)) + "}" if n > 1 else "%r20"
  shape = f"x{n}" + (".trans" if trans else "")
  ptx = kernel(LDMATRIX_BODY.format(shape=shape, dests=dests), nparams=2)
  out0 = np.zeros((32, 4), np.uint32)
  _, out = outputs(ptx, [mats, out0], cluster=1, smem_bytes=512, block=32)
  got = out.view(np.uint32).reshape(32, 4)
  for lane in range(32):
    for i in range(n):
      m = mats[i].T if trans else mats[i]
      row, col = lane // 4, 2 * (lane % 4)
      assert got[lane, i] == int(m[row, col]) | int(m[row, col + 1]) << 16, (lane, i)


@pytest.mark.parametrize("stmt", ["add.s32 %r3, %r1, !%p1;",   # (no {!} source there)
                                  "add.s32 %r3, %r1, (1+2);"])
def test_an_operand_the_checker_does_not_parse_is_refused_by_name(stmt):
  with pytest.raises(NotImplementedError, match=r"operand '(!%p1|\(1\+2\))'"):
    PtxKernel(kernel("  " + stmt))
