"""Load YAML safely while remembering the line of every value.

Values are built with yaml.SafeLoader's constructors (no code execution); the walk records
`path -> line` for each mapping key and sequence item and rejects duplicate keys, which
PyYAML would otherwise merge silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trtverify.util.errors import Problem, SuiteError
from trtverify.util.fsutil import FileTooLarge, read_capped

PathKey = tuple[str | int, ...]

# Reader limits: a suite is a few kilobytes; these stop hostile files in well under a second.
MAX_SUITE_BYTES = 1024 * 1024
MAX_DEPTH = 64  # nesting of mappings and lists, aliases expanded
MAX_NODES = 100_000  # values in the document, aliases expanded (a "billion laughs" stops here)


class SuiteLimit(Exception):
    """A suite exceeds a reader limit; carries the line where it was noticed."""

    def __init__(self, line: int, message: str):
        self.line = line
        super().__init__(message)


class BoundedSafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that bounds nesting depth and the document's size with aliases expanded.

    Aliases compose to shared nodes, so the expanded size and depth of each node are computed
    once, as it is composed: a bomb of nested aliases is refused after a few hundred events,
    before anything walks it. An alias inside its own anchor (a recursive structure) is refused.
    """

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded depth)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None and id(node) not in self._sizes:
                raise SuiteLimit(
                    event.start_mark.line + 1,
                    f"alias '*{event.anchor}' is inside its own anchor (a recursive structure); "
                    "suites must be finite trees",
                )
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise SuiteLimit(mark.line + 1, f"nested more than {MAX_DEPTH} levels deep; a suite is a few levels deep")
        node = super().compose_node(parent, index)
        self._depth -= 1
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        sizes = [self._sizes[id(c)] for c in children]
        size = 1 + sum(s for s, _ in sizes)
        depth = 1 + max((d for _, d in sizes), default=0)
        if size > MAX_NODES:
            raise SuiteLimit(
                node.start_mark.line + 1,
                f"more than {MAX_NODES:,} values once aliases are expanded (an alias bomb?); "
                "a suite holds a few hundred",
            )
        if depth > MAX_DEPTH:
            raise SuiteLimit(
                node.start_mark.line + 1, f"nested more than {MAX_DEPTH} levels deep once aliases are expanded"
            )
        self._sizes[id(node)] = (size, depth)
        return node


class LocatedDocument:
    """A parsed YAML document plus the line (1-based) of each path in it."""

    def __init__(self, data: Any, lines: dict[PathKey, int], file: str):
        self.data = data
        self.lines = lines
        self.file = file

    def line_of(self, path: PathKey) -> int | None:
        """Line of `path`, or of its nearest ancestor that has one."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), None)


_PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


def _walk(
    loader: BoundedSafeLoader,
    node: yaml.Node,
    path: PathKey,
    lines: dict[PathKey, int],
    problems: list[Problem],
    file: str,
) -> Any:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN_TAGS:
        # collections are built here, not by a constructor: refuse tags instead of ignoring them
        problems.append(
            Problem(
                file,
                node.start_mark.line + 1,
                dotted(path),
                f"unsupported YAML tag '{node.tag}' (tags are not allowed in suite files)",
            )
        )
        return None
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolves '<<' merge keys
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                problems.append(
                    Problem(
                        file,
                        key_node.start_mark.line + 1,
                        dotted(path),
                        f"mapping keys must be plain scalars, got {type(key).__name__}",
                    )
                )
                continue
            key_s = str(key) if not isinstance(key, str) else key
            child = path + (key_s,)
            if key_s in out:
                problems.append(
                    Problem(
                        file,
                        key_node.start_mark.line + 1,
                        dotted(child),
                        f"duplicate key '{key_s}' (first defined on line {lines[child]})",
                    )
                )
                continue
            lines[child] = key_node.start_mark.line + 1
            out[key_s] = _walk(loader, value_node, child, lines, problems, file)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            child = path + (i,)
            lines[child] = item.start_mark.line + 1
            items.append(_walk(loader, item, child, lines, problems, file))
        return items
    try:
        return loader.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as exc:
        problems.append(
            Problem(
                file, node.start_mark.line + 1, dotted(path), f"{exc.problem} (tags are not allowed in suite files)"
            )
        )
        return None


def dotted(path: PathKey) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def _unprintable(file: str, text: str, exc: yaml.reader.ReaderError) -> Problem:
    """A control character (a NUL byte, say) where YAML allows only printable text."""
    line = text.count("\n", 0, exc.position) + 1
    column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
    char = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
    return Problem(
        file,
        line,
        "",
        f"control character U+{char:04X} at column {column}: a suite file must be printable text "
        "(was it saved by a binary tool, or is it the wrong file?)",
    )


def load_yaml(path: Path, display: str | None = None) -> LocatedDocument:
    """Parse one YAML file; every problem is raised together as a SuiteError."""
    file = display or str(path)
    try:
        text = read_capped(path, MAX_SUITE_BYTES).decode("utf-8")
    except FileTooLarge:
        too_large = (
            f"larger than {MAX_SUITE_BYTES // 1024} KiB; a suite file is a few KiB of YAML "
            "(is this the right file? keep data in the inputs/dataset files it names)"
        )
        raise SuiteError([Problem(file, None, "", too_large)]) from None
    except FileNotFoundError:
        raise SuiteError([Problem(file, None, "", "file not found")]) from None
    except IsADirectoryError:
        raise SuiteError([Problem(file, None, "", "is a directory, expected a YAML file")]) from None
    except OSError as exc:
        raise SuiteError([Problem(file, None, "", f"cannot be read ({exc.strerror or exc})")]) from None
    except UnicodeDecodeError as exc:
        raise SuiteError([Problem(file, None, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})")]) from None
    try:  # PyYAML checks that the text is printable here, before any parsing
        loader = BoundedSafeLoader(text)
    except yaml.reader.ReaderError as exc:
        raise SuiteError([_unprintable(file, text, exc)]) from None
    problems: list[Problem] = []
    try:
        node = loader.get_single_node()
        if node is None:
            raise SuiteError([Problem(file, 1, "", "the file is empty; a suite needs at least 'name' and 'models'")])
        lines: dict[PathKey, int] = {}
        data = _walk(loader, node, (), lines, problems, file)
    except SuiteLimit as exc:
        raise SuiteError([Problem(file, exc.line, "", str(exc))]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        msg = " ".join(x for x in (exc.context, exc.problem) if x)
        if (
            exc.context_mark is not None
            and exc.problem_mark is not None
            and exc.context_mark.line != exc.problem_mark.line
        ):
            msg += f" (the construct started on line {exc.context_mark.line + 1})"
        raise SuiteError([Problem(file, line, "", f"YAML syntax error: {msg}")]) from None
    except yaml.reader.ReaderError as exc:
        raise SuiteError([_unprintable(file, text, exc)]) from None
    except yaml.YAMLError as exc:
        raise SuiteError([Problem(file, None, "", f"YAML error: {exc}")]) from None
    finally:
        loader.dispose()
    if problems:
        raise SuiteError(problems)
    if not isinstance(data, dict):
        raise SuiteError(
            [
                Problem(
                    file,
                    lines.get((), 1),
                    "",
                    f"the top level must be a mapping of keys (name:, models:, ...), got {type(data).__name__}",
                )
            ]
        )
    return LocatedDocument(data, lines, file)
