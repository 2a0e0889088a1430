"""Executable docs, the stages pages (tests/docs/pages/test_commands_run.py's group_of): every command line runs in a
fresh folder holding the demo's files and exits as the page says; lines of example output appear in its output."""

from pathlib import Path

import pytest

from tests.docs.pages.test_commands_run import _rel, run_page, runnable_pages


@pytest.mark.slow
@pytest.mark.parametrize("page", runnable_pages("stages"), ids=_rel)
def test_doc_lines_run_and_exit_as_documented(page: Path, tmp_path: Path):
    run_page(page, tmp_path)
