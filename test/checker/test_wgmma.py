"""WGMMA in hand-written PTX (check/wgmma.py, wgmma_layout.py): each form runs with the
values NumPy computes, the operands laid out in shared memory and the fragments read
back by this file's own placement code (the core-matrix tiling with the swizzle as a
chunk XOR, not the checker's address arithmetic); each rule is reported in every CI
schedule next to a correct neighbour.  Mosaic's own kernels: test_wgmma_kernels.py."""

import ml_dtypes
import numpy as np
import pytest

from mosaic_async_store.check import check_ptx

from ptx_harness import CI_SCHEDULES, kernel, rules_in_every_schedule

SCHEDULES = len(CI_SCHEDULES)   # seeds 0, 1, 2: what CI runs
_SWIZZLE_CODE = {0: 0, 128: 1, 64: 2, 32: 3}
_TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
          "e5m2": ml_dtypes.float8_e5m2, "s8": np.int8, "u8": np.uint8, "tf32": np.float32}
_K = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}


def _place(image, base, mat, mn_major, swizzle):
  """Writes ``mat`` (rows x K, rows along M or N, a NumPy array) at ``base`` of ``image``
  in the canonical layout, K-major or MN-major (then rows * element bytes is a multiple
  of the swizzle); returns the descriptor's (LBO, SBO)."""
  rows, k = mat.shape
  size = mat.dtype.itemsize
  raw = mat.view(np.uint8).reshape(rows, k, size)
  w = swizzle
  if not mn_major:
    lbo, sbo = (16, 8 * w) if w else (128, 128 * (k * size // 16))
  else:
    atoms = rows * size // (w or 16)
    lbo, sbo = (8 * w, atoms * 8 * w) if w else (atoms * 128, 128)
  for r in range(rows):
    for kk in range(k):
      if not mn_major:
        byte = kk * size                     # a core matrix row: 16 bytes along K
        if w:
          at = _swizzled((r // 8) * sbo + (r % 8) * w + byte, w)
        else:
          at = (r // 8) * sbo + (byte // 16) * lbo + (r % 8) * 16 + byte % 16
      else:
        byte = r * size                      # a core matrix row: 16 bytes along M / N
        if w:
          at = _swizzled((byte // w) * lbo + (kk // 8) * sbo + (kk % 8) * w + byte % w, w)
        else:
          at = (byte // 16) * sbo + (kk // 8) * lbo + (kk % 8) * 16 + byte % 16
      image[base + at:base + at + size] = raw[r, kk]
  return lbo, sbo


def _swizzled(offset, w):
  """The swizzle of TMA and WGMMA (bases 1024-aligned): the 16-byte chunk index XOR the
  row of the pattern's 8 rows of 128 bytes (offset bits 4.. with bits 7..; 64 and 32
  bytes: the low 2 and 1 of them)."""
  chunk, row = (offset >> 4) & 7, (offset >> 7) & 7
  mask = w // 16 - 1
  return offset - (chunk << 4) + (((chunk & ~mask) | ((chunk ^ row) & mask)) << 4)


def _fields(lbo, sbo, swizzle):
  return (lbo >> 4) << 16 | (sbo >> 4) << 32 | _SWIZZLE_CODE[swizzle] << 62


def _d_place(n, dtype):
  """Per lane of the warpgroup, per register: the (row, col) elements it holds."""
  out = []
  for t in range(128):
    w, lane = t // 32, t % 32
    regs = []
    for j in range(n // 4 if dtype == "f16" else n // 2):
      if dtype == "f16":
        row, col = 16 * w + lane // 4 + 8 * (j & 1), 8 * (j >> 1) + 2 * (lane % 4)
        regs.append([(row, col), (row, col + 1)])
      else:
        regs.append([(16 * w + lane // 4 + 8 * ((j >> 1) & 1),
                      8 * (j >> 2) + 2 * (lane % 4) + (j & 1))])
    out.append(regs)
  return out


def _a_place(atype):
  size, k = np.dtype(_TYPES[atype]).itemsize, _K[atype]
  per = 4 // size
  out = []
  for t in range(128):
    w, lane = t // 32, t % 32
    out.append([[(16 * w + lane // 4 + 8 * (j & 1), (k // 2) * (j >> 1) + per * (lane % 4) + e)
                 for e in range(per)] for j in range(4)])
  return out


def _pack(values, places, dtype):
  """Register bits per lane from a matrix and the places each register holds."""
  arr = np.asarray(values, dtype)
  size = arr.dtype.itemsize
  lanes = []
  for regs in places:
    bits = []
    for cells in regs:
      b = b"".join(arr[r, c].tobytes() for r, c in cells)
      bits.append(int.from_bytes(b.ljust(4, b"\0")[:4], "little") if size * len(cells) <= 4
                  else 0)
    lanes.append(bits)
  return np.array(lanes, np.uint32)


def _unpack(bits, places, dtype, shape):
  out = np.zeros(shape, np.float64)
  nd = np.dtype(dtype)
  for lane, regs in zip(bits, places):
    for v, cells in zip(lane, regs):
      raw = int(v).to_bytes(4, "little")
      for i, (r, c) in enumerate(cells):
        out[r, c] = np.frombuffer(raw[i * nd.itemsize:(i + 1) * nd.itemsize], nd)[0]
  return out


_BODY = """
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd2, [k_param_1];
  ld.param.u64 %rd3, [k_param_2];
  mov.b64 %rd4, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd4;
  mov.u32 %r4, %r1;
COPY:
  setp.ge.u32 %p1, %r4, {chunks};
  @%p1 bra COPIED;
  mul.wide.u32 %rd5, %r4, 16;
  add.s64 %rd6, %rd1, %rd5;
  ld.global.v4.u32 {{%r5, %r6, %r7, %r8}}, [%rd6];
  shl.b32 %r9, %r4, 4;
  add.u32 %r10, %r3, %r9;
  st.shared.v4.u32 [%r10], {{%r5, %r6, %r7, %r8}};
  add.u32 %r4, %r4, 128;
  bra COPY;
COPIED:
  {proxy_fence}
  bar.sync 0;
  mul.wide.u32 %rd7, %r1, {in_bytes};
  add.s64 %rd8, %rd2, %rd7;
{loads}
  cvt.u64.u32 %rd9, %r3;
  add.s64 %rd10, %rd9, {a_off};
  shr.u64 %rd10, %rd10, 4;
  and.b64 %rd10, %rd10, 16383;
  or.b64 %rd10, %rd10, {a_fields};
  add.s64 %rd11, %rd9, {b_off};
  shr.u64 %rd11, %rd11, 4;
  and.b64 %rd11, %rd11, 16383;
  or.b64 %rd11, %rd11, {b_fields};
  setp.ne.u32 %p2, {scale_d}, 0;
  {wgmma_fence}
  {before_mma}
  wgmma.mma_async.sync.aligned.m64n{n}k{k}{sat}.{dtype}.{atype}.{btype} {{{d}}}, {a}, %rd11, %p2{imms};
  {after_mma}
  wgmma.commit_group.sync.aligned;
  {after_commit}
  {wait}
  mul.wide.u32 %rd12, %r1, {out_bytes};
  add.s64 %rd13, %rd3, %rd12;
{stores}
"""


def _run(*, atype="f16", btype=None, dtype="f32", n=16, swizzle_a=128, swizzle_b=128,
         trans_a=0, trans_b=0, a_regs=False, scale_d=1, scale_a=1, scale_b=1,
         satfinite=False, seed=0, edits=None, values=None):
  """Builds, runs and checks one wgmma.mma_async: (report, D from the checker, D wanted)."""
  btype = btype or atype
  k = _K[atype]
  rng = np.random.default_rng(seed)
  def sample(t, shape):
    if t in ("s8", "u8"):
      info = np.iinfo(_TYPES[t])
      return rng.integers(info.min, info.max + 1, shape).astype(_TYPES[t])
    x = rng.uniform(-2, 2, shape).astype(np.float32)
    if t == "tf32":
      return (x.view(np.uint32) & ~np.uint32(0x1FFF)).view(np.float32)
    return x.astype(_TYPES[t])
  a, b = values if values is not None else (sample(atype, (64, k)), sample(btype, (k, n)))
  acc_type = {"f32": np.float32, "f16": np.float16, "s32": np.int32}[dtype]
  c = (rng.integers(-1000, 1000, (64, n)) if dtype == "s32" else
       rng.uniform(-4, 4, (64, n))).astype(acc_type)
  image = np.zeros(16384, np.uint8)
  a_off, b_off = 0, 8192
  a_fields = 0
  if not a_regs:
    a_fields = _fields(*_place(image, a_off, a, bool(trans_a), swizzle_a), swizzle_a)
  b_fields = _fields(*_place(image, b_off, np.ascontiguousarray(b.T), bool(trans_b),
                             swizzle_b), swizzle_b)   # (B as N x K: K-major or N-major)
  d_places = _d_place(n, dtype)
  inputs = _pack(c, d_places, acc_type)
  nd = inputs.shape[1]
  if a_regs:
    inputs = np.concatenate([inputs, _pack(a, _a_place(atype), _TYPES[atype])], axis=1)
  d = ", ".join(f"%a{i}" for i in range(nd))
  loads = "\n".join(f"  ld.global.u32 %a{i}, [%rd8+{4 * i}];"
                    for i in range(inputs.shape[1]))
  stores = "\n".join(f"  st.global.u32 [%rd13+{4 * i}], %a{i};" for i in range(nd))
  a_operand = ("{" + ", ".join(f"%a{nd + i}" for i in range(4)) + "}") if a_regs else "%rd10"
  imms = ""
  if atype in ("f16", "bf16"):
    imms = f", {scale_a}, {scale_b}" + ("" if a_regs else f", {trans_a}") + f", {trans_b}"
  elif atype in ("tf32", "e4m3", "e5m2"):
    imms = f", {scale_a}, {scale_b}"
  fill = dict(chunks=len(image) // 16, proxy_fence="fence.proxy.async.shared::cta;",
              in_bytes=4 * inputs.shape[1], loads=loads, a_off=a_off, b_off=b_off,
              a_fields=a_fields, b_fields=b_fields, scale_d=scale_d,
              wgmma_fence="wgmma.fence.sync.aligned;", before_mma="", after_mma="",
              after_commit="", wait="wgmma.wait_group.sync.aligned 0;", n=n, k=k,
              sat=".satfinite" if satfinite else "", dtype=dtype, atype=atype, btype=btype,
              d=d, a=a_operand, imms=imms, out_bytes=4 * nd, stores=stores)
  fill.update(edits or {})
  ptx = kernel(_BODY.format(**fill), nparams=3, regs=".reg .b32 %a<200>;")
  out = np.zeros((128, nd), np.uint32)
  report = check_ptx(ptx, [image, inputs, out], smem_bytes=len(image), block=(128, 1, 1),
                     schedules=SCHEDULES)
  got = (None if report.outputs is None else
         _unpack(report.outputs[2].reshape(128, nd), d_places, acc_type, (64, n)))
  wide = np.int64 if dtype == "s32" else np.float64
  want = (scale_a * a.astype(wide)) @ (scale_b * b.astype(wide)) + \
      (c.astype(wide) if scale_d else 0)
  if dtype == "s32":
    want = np.clip(want, -2**31, 2**31 - 1) if satfinite else \
        ((want + 2**31) % 2**32 - 2**31)
  return report, got, want


@pytest.mark.parametrize("swizzle_a, swizzle_b, trans_a, trans_b", [
    (128, 128, 0, 0), (64, 64, 0, 0), (32, 32, 0, 0), (0, 0, 0, 0),
    (128, 128, 0, 1), (64, 32, 1, 1), (0, 0, 1, 1), (32, 0, 0, 1), (128, 64, 1, 0)])
def test_f16_operands_in_every_layout(swizzle_a, swizzle_b, trans_a, trans_b):
  n = max(16, swizzle_b // 2) if trans_b else 16   # (N-major: whole swizzle rows)
  report, got, want = _run(swizzle_a=swizzle_a, swizzle_b=swizzle_b, trans_a=trans_a,
                           trans_b=trans_b, n=n)
  assert report.ok, str(report)
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("form", [
    dict(atype="bf16", scale_a=-1, n=24),
    dict(atype="bf16", scale_d=0, scale_b=-1),
    dict(atype="f16", dtype="f16", n=32),
    dict(atype="e4m3", btype="e5m2", n=8),
    dict(atype="e5m2", dtype="f16", swizzle_a=32, swizzle_b=64),
    dict(atype="tf32", n=16),
    dict(atype="s8", btype="u8", dtype="s32", n=16),
    dict(atype="u8", btype="s8", dtype="s32", n=24, swizzle_a=0, swizzle_b=0),
    dict(atype="f16", a_regs=True, trans_b=1, n=64),
    dict(atype="bf16", a_regs=True, n=8),
    dict(atype="e4m3", a_regs=True, n=16),
    dict(atype="s8", a_regs=True, dtype="s32", n=8),
], ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
def test_every_type_pairing_and_operand_source(form):
  report, got, want = _run(**form)
  assert report.ok, str(report)
  tol = 2e-3 if form.get("dtype") == "f16" else 1e-6
  np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_s32_satfinite_clamps_and_plain_s32_wraps():
  a = np.full((64, 32), 127, np.int8)
  b = np.full((32, 16), 127, np.int8)
  for sat in (True, False):
    report, got, want = _run(atype="s8", dtype="s32", satfinite=sat, values=(a, b))
    assert report.ok, str(report)
    np.testing.assert_array_equal(got, want)


def test_a_same_shape_accumulator_chain_needs_no_fence_between():
  """Two wgmma.mma_async on one accumulator, no wait between: the second takes the
  first's result (the ISA's default ordering for accumulators of one shape)."""
  second = ("wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {" +
            ", ".join(f"%a{i}" for i in range(8)) + "}, %rd10, %rd11, 1, 1, 1, 0, 0;")
  _, _, ab = _run(seed=3, scale_d=0)   # (the same A, B and C: one seed)
  report, got, want = _run(seed=3, edits={"after_mma": second})
  assert report.ok, str(report)
  np.testing.assert_allclose(got, want + ab, rtol=1e-6, atol=1e-5)   # C + AB + AB


def test_a_chain_across_a_partial_wait_and_results_given_up(monkeypatch):
  """mma 1, commit, mma 2 (chained from mma 1 in flight), commit, wait_group 1 (a warp
  writes mma 1 back while mma 2 may still wait for the other warps' issue: mma 1's
  result is kept for it), wait_group 0.  Mma 2 takes mma 1's result; at the end every
  operation has given up its results (``Warpgroup.forget``: a long kernel's WGMMA state
  stays small).  (A wait_group that only some warps run is ``wgmma-aligned``:
  test_wgmma_aligned.py.)"""
  from mosaic_async_store.check.families.wgmma import mma as wgmma
  made = []
  class Kept(wgmma.Warpgroup):
    __slots__ = ()
    def __init__(self, *args):
      super().__init__(*args)
      made.append(self)
  monkeypatch.setattr(wgmma, "Warpgroup", Kept)
  second = ("wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {" +
            ", ".join(f"%a{i}" for i in range(8)) + "}, %rd10, %rd11, 1, 1, 1, 0, 0;")
  _, _, ab = _run(seed=4, scale_d=0)
  made.clear()
  report, got, want = _run(seed=4, edits={"after_commit": second + "\n  wgmma.commit_group."
                                          "sync.aligned;\n  wgmma.wait_group.sync.aligned 1;"})
  assert report.ok, str(report)
  np.testing.assert_allclose(got, want + ab, rtol=1e-6, atol=1e-5)   # C + AB + AB
  assert len(made) == SCHEDULES
  for wg in made:
    assert wg.forgotten == len(wg.entries) == 2
    assert all(e.out is None and e.inputs is None for e in wg.entries)


def test_a_chain_that_takes_some_registers_in_flight_and_others_not():
  """Mma 2 (the same shape) takes %a0..%a3, which mma 1 still has in flight (a chain: it
  takes mma 1's results there), and %a8..%a11, which no operation holds (loaded with
  C's first four registers' values, accessed before the fence): its first four
  registers hold C + AB + AB, mma 1's last four C + AB."""
  d = "%a0, %a1, %a2, %a3, %a8, %a9, %a10, %a11"
  second = (f"wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {{{d}}}, %rd10, %rd11, "
            "1, 1, 1, 0, 0;")
  loads = "\n".join([f"  ld.global.u32 %a{i}, [%rd8+{4 * i}];" for i in range(8)] +
                    [f"  ld.global.u32 %a{8 + i}, [%rd8+{4 * i}];" for i in range(4)])
  _, _, ab = _run(seed=5, scale_d=0)
  report, got, want = _run(seed=5, edits={"after_mma": second, "loads": loads})
  assert report.ok, str(report)
  chained = np.zeros(want.shape, bool)   # (the elements of each lane's registers 0..3)
  for regs in _d_place(16, "f32"):
    for cells in regs[:4]:
      for r, c in cells:
        chained[r, c] = True
  np.testing.assert_allclose(got, want + np.where(chained, ab, 0), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("edits, rule", [
    ({"wgmma_fence": ""}, "wgmma-fence"),
    ({"before_mma": "mov.b32 %a0, 0;"}, "wgmma-fence"),
    ({"wait": ""}, "wgmma-registers"),
    ({"after_commit": "add.f32 %a1, %a1, %a2;"}, "wgmma-registers"),
    ({"proxy_fence": ""}, "proxy-fence"),
    ({"after_commit": "st.shared.u32 [%r3], %r1;"}, "race"),
])
def test_each_rule_is_reported_in_every_schedule(edits, rule):
  report, _, _ = _run(edits=edits)
  assert rule in rules_in_every_schedule(report), str(report)


def test_warps_issuing_different_instructions_break_aligned():
  """Warp 0 issues the operation from another instruction than warps 1 to 3."""
  other = ("setp.lt.u32 %p3, %r1, 32;\n  @%p3 bra OTHER;\n  {mma}\n  bra ISSUED;\nOTHER:\n"
           "  {mma}\nISSUED:")
  mma = ("wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {" +
         ", ".join(f"%a{i}" for i in range(8)) + "}, %rd10, %rd11, %p2, 1, 1, 0, 0;")
  report, _, _ = _run(edits={"before_mma": other.format(mma=mma)})
  assert "wgmma-aligned" in rules_in_every_schedule(report), str(report)


def test_a_warp_that_never_issues_leaves_the_wait_hanging():
  report, _, _ = _run(edits={"before_mma": "setp.ge.u32 %p4, %r1, 96;\n  @%p4 ret;"})
  assert "hang" in rules_in_every_schedule(report), str(report)


def test_a_tf32_operand_with_low_mantissa_bits_is_refused_by_name():
  a = np.full((64, 8), 1.0000001, np.float32)   # low mantissa bits set
  b = np.ones((8, 16), np.float32)
  with pytest.raises(Exception, match="tf32"):
    report, _, _ = _run(atype="tf32", values=(a, b))
    if report.unfinished or not report.ok:
      raise AssertionError(str(report))
