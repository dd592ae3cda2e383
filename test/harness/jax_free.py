"""Where the jax-free tests live, and the packages they exercise.

.ci/run runs the tests of these folders once, on its first jax version, and leaves them
out of the later ones (``--jax-versioned``, test/conftest.py); that is right only while
nothing they import reaches jax, which test/checker/test_no_jax.py enforces for every
folder and package named here.
"""

__all__ = ["FOLDERS", "PACKAGES"]

# Relative to the repository root, with the trailing slash (a path prefix).
FOLDERS = (
    "test/checker/",   # the PTX checker: hand-written PTX, its tables and parts
    "test/planner/",   # the store planner and its verifier (plan_store, verify)
)
# The package's sub-packages those tests exercise; none of their modules may reach jax.
PACKAGES = ("check", "plan")
