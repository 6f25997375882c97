"""What the ClickHouse-compatible HTTP endpoint lets through, and how a query is prepared for chDB.

A query arrives as text. The lexer here finds, at the top level, a trailing ``FORMAT <name>`` (taken out: the
format is passed to chDB), a trailing ``SETTINGS`` clause (kept, after the URL's settings, so the query's own win as
in ClickHouse), a second statement (refused, as ClickHouse's HTTP interface does) and ``INTO OUTFILE`` (refused: it
writes a file). Read-only mode then asks ClickHouse's own parser (``EXPLAIN AST``) what the statement is: SELECT,
SHOW, DESCRIBE, EXISTS or EXPLAIN only, and no table function or function that reads the host's files or network
(chDB runs inside this process: ``file()``, ``url()``, ``remote()``, ``Python()``... would reach what the service
can reach). Last, ``readonly = 2`` is appended as the final setting: ClickHouse's own guard against writes and
DDL, with settings still changeable as the Grafana plugin and clickhouse-connect expect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "ALLOWED_TABLE_FUNCTIONS", "ClickHouseError", "DENIED_FUNCTIONS", "PreparedQuery", "Token", "check_ast",
    "prepare", "settings_clause", "tokenize",
]

# Table functions that read only what the query itself says (or the store's own tables).
ALLOWED_TABLE_FUNCTIONS = frozenset({
    "numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateSeries", "values", "view", "merge",
    "null", "generateRandom", "format", "loop",
})
# Ordinary functions that read the host's files.
DENIED_FUNCTIONS = frozenset({"file"})
# Settings that make the server read or write files of its own choosing (format schemas and templates).
_DENIED_SETTING = re.compile(r"format_schema|format_template|output_format_schema|^readonly$|^allow_ddl$", re.I)
_SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
_READ_ONLY_ROOTS = ("Select", "Show", "Describe", "Exists", "Explain")


class ClickHouseError(Exception):
    """An error reported the way ClickHouse reports it: a code, its name, a message."""

    def __init__(self, code: int, name: str, message: str) -> None:
        super().__init__(message)
        self.code, self.name, self.message = code, name, message


TokenKind = Literal["word", "string", "quoted", "number", "punct", "param"]


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    text: str
    start: int
    end: int
    depth: int


def tokenize(sql: str) -> list[Token]:
    """ClickHouse's lexical structure, enough to see the statement's top level: strings ('' and \\ escapes),
    quoted identifiers, heredocs, -- # and nested /* */ comments, query parameters, parentheses."""
    tokens: list[Token] = []
    i, n, depth = 0, len(sql), 0
    while i < n:
        ch = sql[i]
        if ch.isspace():
            i += 1
        elif sql.startswith("--", i) or ch == "#":
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            level, i = 1, i + 2
            while i < n and level:
                if sql.startswith("/*", i):
                    level, i = level + 1, i + 2
                elif sql.startswith("*/", i):
                    level, i = level - 1, i + 2
                else:
                    i += 1
            if level:
                raise ClickHouseError(62, "SYNTAX_ERROR", "Syntax error: unterminated comment")
        elif ch in "'\"`":
            j = i + 1
            while j < n:
                if sql[j] == "\\":
                    j += 2
                    continue
                if sql[j] == ch:
                    if j + 1 < n and sql[j + 1] == ch:
                        j += 2
                        continue
                    break
                j += 1
            if j >= n:
                raise ClickHouseError(62, "SYNTAX_ERROR", "Syntax error: unterminated quoted string or identifier")
            tokens.append(Token("string" if ch == "'" else "quoted", sql[i:j + 1], i, j + 1, depth))
            i = j + 1
        elif ch == "$" and (m := re.match(r"\$(\w*)\$", sql[i:])):
            tag = m.group(0)
            end = sql.find(tag, i + len(tag))
            if end < 0:
                raise ClickHouseError(62, "SYNTAX_ERROR", "Syntax error: unterminated heredoc")
            tokens.append(Token("string", sql[i:end + len(tag)], i, end + len(tag), depth))
            i = end + len(tag)
        elif ch == "{":
            end = sql.find("}", i)
            end = n - 1 if end < 0 else end
            tokens.append(Token("param", sql[i:end + 1], i, end + 1, depth))
            i = end + 1
        elif ch.isalpha() or ch == "_":
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            tokens.append(Token("word", sql[i:j], i, j, depth))
            i = j
        elif ch.isdigit():
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] in "._" or (sql[j] in "+-" and sql[j - 1] in "eE")):
                j += 1
            tokens.append(Token("number", sql[i:j], i, j, depth))
            i = j
        else:
            if ch == ")":
                depth -= 1
            tokens.append(Token("punct", ch, i, i + 1, depth))
            if ch == "(":
                depth += 1
            i += 1
    return tokens


@dataclass(slots=True)
class PreparedQuery:
    """A statement ready for chDB: ``sql`` ends with every setting, readonly last; ``fmt`` is its output format."""

    sql: str
    fmt: str | None  # the query's own FORMAT, if it had one
    kind: str = ""  # the first word (SELECT, INSERT, ...)
    query_settings: list[str] = field(default_factory=list)  # the names set in the query's SETTINGS clauses


def _is_settings_clause(tokens: list[Token]) -> bool:
    """name = value [, name = value ...]: a trailing SETTINGS clause, nothing else after it."""
    i = 0
    while i < len(tokens):
        if i + 2 >= len(tokens) or tokens[i].kind not in ("word", "quoted") or tokens[i + 1].text != "=":
            return False
        i += 2
        if tokens[i].text == "-" and i + 1 < len(tokens):
            i += 1
        if tokens[i].kind not in ("word", "string", "number", "param"):
            return False
        i += 1
        if i < len(tokens):
            if tokens[i].text != ",":
                return False
            i += 1
    return True


def _setting_names(tokens: list[Token]) -> list[str]:
    """Every name set in any SETTINGS clause of the query (subqueries' included): name = literal [, ...]."""
    names = []
    for k, tok in enumerate(tokens):
        if tok.kind != "word" or tok.text.upper() != "SETTINGS":
            continue
        j = k + 1
        while j + 2 < len(tokens) + 1 and j + 1 < len(tokens) and tokens[j].kind in ("word", "quoted") \
                and tokens[j + 1].text == "=":
            names.append(tokens[j].text.strip("`\""))
            j += 2
            if j < len(tokens) and tokens[j].text == "-":
                j += 1
            j += 1  # the value
            if j < len(tokens) and tokens[j].text == ",":
                j += 1
            else:
                break
    return names


def settings_clause(settings: dict[str, str]) -> list[str]:
    """URL settings as ``name = literal`` items; names checked, values as numbers or quoted strings."""
    items = []
    for name, value in settings.items():
        if not _SETTING_NAME.match(name):
            raise ClickHouseError(115, "UNKNOWN_SETTING", f"Setting {name!r} is not a valid setting name")
        if _DENIED_SETTING.search(name):
            raise ClickHouseError(164, "READONLY", f"Cannot modify '{name}' setting through this endpoint")
        literal = value if _NUMBER.match(value) else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        items.append(f"{name} = {literal}")
    return items


def prepare(sql: str, url_settings: dict[str, str], read_only: bool) -> PreparedQuery:
    """The statement with its FORMAT taken out and every setting at its end (readonly last, when read-only)."""
    tokens = tokenize(sql)
    while tokens and tokens[-1].text == ";" and tokens[-1].depth == 0:
        sql = sql[:tokens[-1].start]
        tokens = tokens[:-1]
    if not tokens:
        raise ClickHouseError(62, "SYNTAX_ERROR", "Empty query")
    if any(t.text == ";" and t.depth == 0 for t in tokens):
        raise ClickHouseError(62, "SYNTAX_ERROR", "Multi-statements are not allowed")
    words = [t.text.upper() if t.kind == "word" else "" for t in tokens]
    if any(a == "INTO" and b == "OUTFILE" for a, b in zip(words, words[1:], strict=False)):
        raise ClickHouseError(164, "READONLY", "INTO OUTFILE is not allowed through this endpoint")
    kind = words[0]
    fmt = None
    if kind != "INSERT" and len(tokens) >= 2 and words[-2] == "FORMAT" and tokens[-1].kind in ("word", "quoted") \
            and tokens[-1].depth == 0 and tokens[-2].depth == 0:
        fmt = tokens[-1].text.strip("`\"")
        sql = sql[:tokens[-2].start]
        tokens = tokens[:-2]
    names = _setting_names(tokens)
    for name in names:
        if _DENIED_SETTING.search(name) and not (name.lower() == "readonly" and read_only):
            raise ClickHouseError(164, "READONLY", f"Cannot modify '{name}' setting through this endpoint")
    if kind == "INSERT" or not (url_settings or read_only):
        return PreparedQuery(sql.rstrip(), fmt, kind, names)
    items = settings_clause(url_settings)
    body, own = sql.rstrip(), ""
    last = max((k for k, t in enumerate(tokens) if t.depth == 0 and words[k] == "SETTINGS"), default=-1)
    if last >= 0 and _is_settings_clause(tokens[last + 1:]):
        body, own = sql[:tokens[last].start].rstrip(), sql[tokens[last].end:].strip()
    if own:
        items.append(own)
    if read_only:
        items.append("readonly = 2")
    return PreparedQuery(f"{body}\nSETTINGS {', '.join(items)}" if items else body, fmt, kind, names)


def check_ast(ast: str) -> None:
    """Read-only mode, from ``EXPLAIN AST``'s tree: the statement kind, and every function and table function."""
    lines = [ln for ln in ast.splitlines() if ln.strip()]
    if not lines:
        raise ClickHouseError(62, "SYNTAX_ERROR", "Empty query")
    root = lines[0].split()[0]
    if not root.startswith(_READ_ONLY_ROOTS):
        raise ClickHouseError(164, "READONLY", f"Cannot execute query in readonly mode ({root})")
    parents: list[str] = []
    for line in lines:
        depth = len(line) - len(line.lstrip(" "))
        label = line.strip()
        del parents[depth:]
        parent = parents[-1] if parents else ""
        parents.append(label)
        if not label.startswith("Function "):
            continue
        name = label.split()[1]
        if parent.startswith("TableExpression"):
            if name not in ALLOWED_TABLE_FUNCTIONS:
                raise ClickHouseError(164, "READONLY", f"Table function {name} is not allowed through this "
                                      "endpoint (it reads files, the network or the process)")
        elif name in DENIED_FUNCTIONS:
            raise ClickHouseError(164, "READONLY", f"Function {name} is not allowed through this endpoint "
                                  "(it reads the host's files)")
