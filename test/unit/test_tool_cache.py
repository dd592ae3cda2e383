"""test/harness/tool_cache.py keys a tool's results by what they depend on (its binary's
contents and the toolchain's distribution versions), not by where the tool lies: the
venvs of .ci/run's later stages, each with its own copy of the same tools, share one
cache."""

import shutil

import tool_cache


def test_a_copy_of_a_tool_elsewhere_has_the_same_identity(tmp_path):
  from mosaic_async_store.tools import toolchain
  ptxas = toolchain.find_tool("ptxas")
  copy = tmp_path / "ptxas"
  shutil.copy(ptxas, copy)
  assert tool_cache._identity(ptxas) == tool_cache._identity(copy)


def test_another_binary_has_another_identity(tmp_path):
  from mosaic_async_store.tools import toolchain
  other = tmp_path / "ptxas"
  other.write_bytes(toolchain.find_tool("ptxas").read_bytes() + b"\0")
  assert tool_cache._identity(toolchain.find_tool("ptxas")) != tool_cache._identity(other)
