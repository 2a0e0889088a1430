"""Options the commands share, and the one rule for options with several values.

Every repeatable option takes one or more values after one flag, as Polygraphy's options do
(`--stage framework layerwise`, `--vs b.graph.json b.profile.json`), and may also be repeated, as
pytest's are (`--stage framework --stage layerwise`). The values end at the next word that starts
with '-' (or at `--`, after which every word is an argument); `--check=VALUE` is exactly one value.
Where that swallows the command's own arguments (`init --candidate A B MODEL`), click's error
for the missing argument says which option took which words and how to write the line instead.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from trtverify.util.words import count

_NEGATIVE = re.compile(r"^-\d")
# (flag, words) of each use of a Several option in this process's command line, for error hints
TAKEN: list[tuple[str, list[str]]] = []
ARGUMENTS: list[str] = []  # the argument names (SUITE, CANDIDATES) of the command those options belong to


class Several(click.Option):
    """A repeatable option that also takes several values after one flag."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["multiple"] = True
        super().__init__(*args, **kwargs)

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        super().add_to_parser(parser, ctx)
        ARGUMENTS[:] = [p.human_readable_name.upper() for p in ctx.command.params if isinstance(p, click.Argument)]
        if not getattr(parser, "_trtverify_explicit", False):  # `--check=VALUE` is one value: note the '='
            match = parser._match_long_opt

            def noting(opt: str, explicit_value: Any, state: Any) -> None:
                state.trtverify_explicit = explicit_value is not None
                match(opt, explicit_value, state)

            parser._match_long_opt = noting
            parser._trtverify_explicit = True
        for flag in self.opts:
            parsed = parser._long_opt.get(flag) or parser._short_opt.get(flag)
            if parsed is None:  # pragma: no cover - click registers every flag of an option
                continue
            parsed.process = self._greedy(parsed.process, flag)

    @staticmethod
    def _greedy(process: Any, flag: str) -> Any:
        def take(value: Any, state: Any) -> None:
            process(value, state)
            words = [value]
            if getattr(state, "trtverify_explicit", False):
                state.trtverify_explicit = False
                return
            while state.rargs and (not state.rargs[0].startswith("-") or _NEGATIVE.match(state.rargs[0])):
                word = state.rargs.pop(0)
                process(word, state)
                words.append(word)
            TAKEN.append((flag, words))

        return take


def several_hint(error: str = "", *, missing_argument: bool = False) -> str:
    """For a usage error: which options took several words, where that explains the error: an argument is
    missing (click says so), or an option took, after its first value, an existing file or folder (what the
    command's arguments are) and the error names that word or one of the command's arguments (`give a CANDIDATE
    model`). '' otherwise: a refusal that has nothing to do with the options (another run writes to --out,
    an unknown stage) gets no hint."""
    took = [(flag, words) for flag, words in TAKEN if len(words) > 1]
    if not missing_argument:
        about_arguments = any(re.search(rf"\b{re.escape(a.rstrip('S'))}S?\b", error) for a in ARGUMENTS)
        took = [
            (flag, words)
            for flag, words in took
            if any(Path(w).exists() and (about_arguments or _names(error, w)) for w in words[1:])
        ]
    if not took:
        return ""
    parts = "; ".join(f"{flag} took {count(len(w), 'value')}: {' '.join(w)}" for flag, w in took)
    return (
        f"\nnote: {parts}. An option's values run up to the next option: put the command's arguments "
        "before the options, or end the values with --"
    )


class OnnxFile(click.Path):
    """An ONNX model argument: a usage error (exit 2) naming the file where it is missing, a folder, or not an
    ONNX model (empty, cut short, text), before the command makes anything. Only the file's structure is walked
    (graph_io's reading): its weights are not read."""

    def __init__(self) -> None:
        super().__init__(path_type=Path, dir_okay=False, exists=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from trtverify.graph.onnxinfo import onnx_io
        from trtverify.util.errors import UsageError

        path = super().convert(value, param, ctx)
        try:
            onnx_io(Path(path))
        except UsageError as exc:
            self.fail(str(exc), param, ctx)
        return path


def _names(text: str, word: str) -> bool:
    """`text` names `word` (or, for a path, its file name) as a whole word, not inside another."""
    return any(re.search(rf"(?<![\w.-]){re.escape(w)}(?![\w-])", text) for w in {word, Path(word).name} if w.strip("."))


# options several commands share, defined once
OUT = click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Output folder [default: the suite's out:, else reports/<suite name>]; an existing results.json of another "
    "suite file there is replaced only when --out names the folder.",
)
JUNIT = click.option(
    "--junit",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write JUnit XML here: one test case per check.",
)
QUIET = click.option("-q", "--quiet", is_flag=True, help="Print only the verdict line.")
PLUGIN = click.option(
    "--plugin",
    "plugins",
    multiple=True,
    metavar="OP=module:callable",
    help="A reference for plugin nodes of op type OP: called with the node's inputs (numpy) and attributes, returns "
    "its outputs; module found in the current folder (repeatable; docs/plugins.md).",
)


def plugin_map(values: tuple[str, ...]) -> dict[str, str]:
    """--plugin values, checked (exit 2 for a malformed one or an op given twice)."""
    from trtverify.plugins.registry import parse_option
    from trtverify.util.errors import UsageError

    out: dict[str, str] = {}
    for v in values:
        op, spec = parse_option(v)
        if op in out and out[op] != spec:
            raise UsageError(f"--plugin {op} given twice ({out[op]}, {spec}): give one reference per op type")
        out[op] = spec
    return out


def unclaimed_folder(folder: Path, suite: Path, sha256: str | None = None, chosen: str = "", hint: str = "") -> Path:
    """`folder`, where a run of the suite file `suite` may write without `--out` naming it: it holds no
    results.json, or one written from this suite file (a rerun replaces its own results). Otherwise a
    UsageError (exit 2, nothing written) saying what would be replaced and how to go on; `chosen` says how the
    folder was chosen ("its default folder"), `hint` another way out."""
    from trtverify.results.io import foreign_results
    from trtverify.util.errors import UsageError

    other = foreign_results(folder, suite, sha256)
    if other is None:
        return folder
    raise UsageError(
        f"{folder} holds {other}; this run of {suite}{f' ({chosen})' if chosen else ''} would replace it. Pass "
        f"--out {folder} to replace it, or --out another folder{hint}"
    )
