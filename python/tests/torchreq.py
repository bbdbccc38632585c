"""Tests that need torch: skipped with a message where torch is missing,
failed in CI (CI=true), where a missing torch is a broken setup."""

import os
import unittest


def have_torch():
    try:
        import torch  # noqa: F401
        import torch.distributed as dist

        return dist.is_available()
    except ImportError:
        return False


def require_torch(case):
    """Marks a TestCase class as needing torch.distributed."""
    if have_torch():
        return case
    msg = ("torch with torch.distributed is not importable by %s; install it (Debian: apt-get install "
           "--no-install-recommends python3-torch, then run the tests with /usr/bin/python3)" % os.sys.executable)
    if os.environ.get("CI", "").lower() in ("true", "1"):
        def setUpClass(cls):
            raise AssertionError("CI=true: " + msg)
        case.setUpClass = classmethod(setUpClass)
        return case
    return unittest.skip(msg)(case)
