"""Shared fixture of the tests of the book's helpers (``course_book``) and of the chapters' own checks
(listings, concept checks, figures, the claims in the prose, the Chinese edition)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state (reproducible failures)."""
    torch.manual_seed(0)
