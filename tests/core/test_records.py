"""Each record's fields are declared once; every spelled-out copy of them (the compiled core writes ``__init__``,
``from_columns`` and column appends out by hand, for speed) agrees with the declaration."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from detector.core.decisions import Decision
from detector.core.escalation import Escalation
from detector.core.models import Call, Turn
from detector.core.rules import FailureStreak
from detector.core.scope_state import ScopeState
from detector.core.score_rows import ScoreColumns, ScoreRow
from detector.core.signal_values import NO_SIGNALS, SignalValues
from detector.core.turn_view import TurnView
from detector.settings.loop_settings import Weights
from detector.settings.vocabulary import SIGNAL_NAMES
from detector.storage.call_rows import CALL_COLUMNS


def field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def base_type(annotation: object) -> str:
    """A field's type, as far as the runtime checks it: ``tuple`` for ``tuple[str, ...]``, ``int`` for
    ``int | None`` (a string under ``from __future__ import annotations``, a forward reference in a NamedTuple;
    the compiled core keeps the evaluated type, without its parameters)."""
    if isinstance(annotation, typing.ForwardRef):
        annotation = annotation.__forward_arg__
    name = annotation if isinstance(annotation, str) else str(getattr(annotation, "__name__", annotation))
    return name.split(" | ")[0].split("[")[0]


def distinct_value(annotation: object, i: int) -> object:
    """A value of the field's type that no other field of the record gets."""
    values: dict[str, object] = {"int": 1000 + i, "float": i + 0.5, "bool": i % 2 == 0, "str": f"v{i}",
                                 "tuple": (f"v{i}",), "frozenset": frozenset({f"v{i}"}), "list": [1000 + i]}
    return values[base_type(annotation)]


def positional_round_trip(cls: type) -> None:
    """Built with one distinct value per field, in field order, each attribute holds its own value: the written-out
    ``__init__`` takes exactly the fields, in order."""
    fields = dataclasses.fields(cls)
    values = [distinct_value(f.type, i) for i, f in enumerate(fields)]
    built = cls(*values)
    assert [getattr(built, f.name) for f in fields] == values
    assert cls(**{f.name: v for f, v in zip(fields, values, strict=True)}) == built


def test_signal_values_are_the_spec_signals_in_order():
    assert SignalValues._fields == SIGNAL_NAMES
    assert set(Weights.model_fields) == set(SIGNAL_NAMES)
    assert (0.0,) * len(SIGNAL_NAMES) == NO_SIGNALS
    values = SignalValues(*(i / 10 for i in range(7)))
    assert list(values.as_dict()) == list(SIGNAL_NAMES) and values.error_cycling == 0.3


@pytest.mark.parametrize("cls", [Call, TurnView, Decision, Escalation, FailureStreak])
def test_written_out_init_takes_every_field_in_order(cls):
    positional_round_trip(cls)


def test_turn_init_takes_every_field_in_order():
    call, tool = Call(1, "t", "s1", "sess"), Call(2, "t", "s2", "sess", operation="execute_tool")
    turn = Turn(call, [tool], 0.5, {"c": {}}, "view")
    assert (turn.call, turn.tools, turn.cost_usd, turn.compact, turn.view) == (call, [tool], 0.5, {"c": {}}, "view")
    assert field_names(Turn) == ["call", "tools", "cost_usd", "compact", "view"]


def test_scope_state_init_takes_every_persisted_field():
    derived = {"from_level", "from_confidence", "from_dominant", "from_instruction", "from_trips", "from_flag",
               "from_evidence", "from_flag_event", "marked"}
    fields = [f for f in dataclasses.fields(ScopeState) if f.name not in derived]
    given = {f.name: getattr(ScopeState("session", "s"), f.name) for f in fields}  # every default, by keyword
    st = ScopeState(**given)
    assert all(getattr(st, name) == value for name, value in given.items())
    assert st.from_level == -1 and st.marked == 0  # what the decision check and the batch mark start from


def test_call_from_columns_reads_every_field():
    fields = dataclasses.fields(Call)
    expected = Call(*(distinct_value(f.type, i) for i, f in enumerate(fields)))
    columns = {f.name: [getattr(expected, f.name)] for f in fields}
    assert Call.from_columns(columns) == [expected]
    assert Call.from_row({f.name: getattr(expected, f.name) for f in fields}) == expected


def test_the_detector_query_selects_exactly_the_call_fields():
    aliases = [part.rsplit(" AS ", 1)[-1].strip() for part in CALL_COLUMNS.split(", ")]
    assert aliases == field_names(Call)


def test_score_columns_hold_one_list_per_score_row_field():
    row = ScoreRow(*(SignalValues(*(i / 10 for i in range(7))) if name == "signals" else distinct_value(
        ScoreRow.__annotations__[name], i) for i, name in enumerate(ScoreRow._fields)))
    columns = ScoreColumns.of([row])  # append(*row): the fields in ScoreRow order
    assert columns.rows() == [row]
    assert all(getattr(columns, name) == [value] for name, value in row._asdict().items())


def test_no_core_module_imports_a_configuration_model():
    """The core is handed plain tuning values (detector/detection/engine_config.py compiles them): none of its modules
    imports pydantic or the configuration models, directly."""
    import ast
    from pathlib import Path

    core = Path(__file__).resolve().parents[2] / "detector" / "core"
    forbidden = ("pydantic", "detector.settings.config", "detector.settings.rule_params")
    for path in sorted(core.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.startswith(forbidden) for n in names), (path.name, names)
