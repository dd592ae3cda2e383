"""bench/ptxas_allocation.py (test/harness/ptxas_allocation_report.py): a rewrite of
upstream's kernel that changes no value (its 64-bit register loads split into 32-bit
halves) and what ptxas makes of it."""

SNIPPET = """\
.visible .entry k(
)
{
\t.reg .b32 \t%r<4>;
\t.reg .b64 \t%rd<140>;
\tld.global.b64 \t%rd78, [%rd137+296];
\tld.global.b64 %rd80, [%rd137];
\tst.global.b64 [%rd137], %rd78;
}
"""


def test_split_wide_loads_rewrites_each_64_bit_load_into_two_halves():
  import ptxas_allocation_report as alloc
  text, n = alloc.split_wide_loads(SNIPPET)
  assert n == 2
  assert "ld.global.b64" not in text
  assert "\tld.global.v2.b32 {%mas_half0, %mas_half1}, [%rd137+296];" in text
  assert "\tmov.b64 %rd78, {%mas_half0, %mas_half1};" in text
  assert "\tmov.b64 %rd80, {%mas_half2, %mas_half3};" in text
  assert text.index(".reg .b32 %mas_half<4>;") < text.index(".reg .b32 \t%r<4>;")
  assert "st.global.b64 [%rd137], %rd78;" in text           # other lines untouched
  assert alloc.split_wide_loads("no loads\n") == ("no loads\n", 0)


def test_the_split_kernel_means_the_same_and_ptxas_adds_moves():
  """The rewritten kernel passes the PTX checker (measure_case runs it: bytes and
  waits); ptxas gives it more register moves and the same SASS otherwise."""
  import ptxas_allocation_report as alloc
  row = alloc.measure_case(alloc.CASES[0])
  up, split, ours = row["upstream"], row["upstream_split"], row["ours"]
  assert row["loads_split"] == 64
  assert split["sass_moves"] > up["sass_moves"] + 32
  assert split["sass"] - split["sass_moves"] == up["sass"] - up["sass_moves"]
  assert ours["sass"] - ours["sass_moves"] < up["sass"] - up["sass_moves"]
  text = alloc.markdown([row], "cmd")
  assert "| upstream, 64-bit loads split |" in text
