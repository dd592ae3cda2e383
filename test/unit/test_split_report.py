"""bench/split_addresses.py's measurement (test/harness/split_report.py): this
project's cost kernel with its xor-formed address bases split and plain, compiled by
the deviceless toolchain (CPU only)."""

import pytest

from mosaic_async_store.demo.config import StoreConfig

S = StoreConfig
TMEM_ADD = dict(dtype="int32", atomic="add", shape=(128, 128), layout="TMEM_NATIVE_V4")


@pytest.mark.long
def test_splitting_pays_into_a_peer_and_not_into_the_own_cta():
  """The TMEM_NATIVE_V4 int32 add split is cheaper in SASS less moves and selects into a
  peer, where the planner splits it, and dearer into the executing CTA, where ptxas
  folds the own shared base into the address and the planner keeps plain xors."""
  import split_report
  peer, local = S(**TMEM_ADD), S(**TMEM_ADD, target="local")
  assert split_report.would_split(peer) and split_report.would_split(local)
  assert not split_report.would_split(S())        # one xor base per chunk: nothing to split
  rows = [split_report.measure(peer), split_report.measure(local)]
  assert rows[0]["chosen"] and rows[0]["split"]["sass_core"] < rows[0]["plain"]["sass_core"]
  assert not rows[1]["chosen"] and rows[1]["split"]["sass_core"] > rows[1]["plain"]["sass_core"]
  text = split_report.markdown(rows, "cmd", 1.0)
  assert "| peer | 1 | 1 / 0 / 0 | 1 |" in text and "| local | 1 | 0 / 0 / 1 | 0 |" in text


def test_the_split_report_command_writes_its_report(tmp_path):
  import split_report
  out = tmp_path / "split.md"
  assert split_report.main(["--every", "5040", "--jobs", "1", "--out", str(out)]) == 0
  text = out.read_text()
  assert "python bench/split_addresses.py --every 5040 --jobs 1" in text
  assert "| --- | --- |" in text
