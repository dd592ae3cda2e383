"""A broken rule leaves the checker's machine one way: as a ``findings.Finding`` record,
appended (``findings.report``) or raised inside the one stop exception
(``findings.Stop``, made directly, by ``findings.fault`` or by ``asyncops.at_issue``).

Every ``raise`` in check/ is read with ``ast``; what it raises must be a ``Stop`` or one
of the exceptions that are not findings (the checker's limits, refusals of the
arguments, its own failures).  A new exception class carrying a rule would have to be
added to ``NOT_FINDINGS`` by name, where a reviewer sees it.
"""

import ast
import pathlib

import pytest

CHECK = pathlib.Path(__file__).parents[2] / "python" / "mosaic_async_store" / "check"

STOPS = {"Stop", "fault", "at_issue", "asyncops.at_issue"}   # each is a findings.Stop
NOT_FINDINGS = {
    "NotImplementedError", "NotInIsa",                  # what the checker does not run
    "CheckerError", "RuntimeError", "AttributeError",   # the checker's own failures
    "budget_mod.BudgetExceeded", "FindingLimit",        # its limits
    "refuse_limit",                                     # (errors.CheckerLimit)
    "refuse", "refuse_type", "refused", "_mismatch",    # the arguments refused
    "ValueError", "KeyError",                           # internal preconditions
    "worker_raised",                # a run's exception re-raised from its worker (parallel.py)
}


def raised(source: str) -> list[tuple[int, str]]:
  """(line, what) of every ``raise X(...)`` / ``raise X`` in ``source``."""
  out = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Raise) and node.exc is not None:
      exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
      out.append((node.lineno, ast.unparse(exc)))
  return out


def unexpected(source: str) -> list[tuple[int, str]]:
  return [(line, what) for line, what in raised(source)
          if what not in STOPS | NOT_FINDINGS]


@pytest.mark.parametrize("path", sorted(CHECK.rglob("*.py")), ids=lambda p: str(p.relative_to(CHECK)))
def test_a_finding_is_raised_only_inside_stop(path):
  assert not unexpected(path.read_text()), f"{path.name}: {unexpected(path.read_text())}"


def test_every_finding_raised_is_a_finding_record():
  """``Stop`` is made from a ``Finding`` wherever check/ builds one in place (or from one
  ``findings.locate`` placed)."""
  for path in sorted(CHECK.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if (isinstance(node, ast.Call) and ast.unparse(node.func) == "Stop"
          and isinstance(node.args[0], ast.Call)):
        # (wgmma's operands_differ returns guard.failure's Finding)
        assert ast.unparse(node.args[0].func) in ("Finding", "_fail", "failure", "_bad",
                                                  "findings.locate", "operands_differ"), \
            f"{path.name} line {node.lineno}: Stop({ast.unparse(node.args[0])[:60]})"


def test_the_scan_sees_another_finding_exception():
  bad = "class ProtocolError(RuntimeError): pass\ndef f():\n  raise ProtocolError('race', 'x')\n"
  assert unexpected(bad) == [(3, "ProtocolError")]
  assert unexpected("def f(e):\n  raise Stop(e.finding)\n") == []
