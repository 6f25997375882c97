"""The escalation state machine: none -> warn -> throttle -> inject -> hard_stop, one level at a time.

Pure and per call. A level is entered when the (EMA-smoothed) confidence has been at or above that
level's threshold for its consecutive count of scored calls, and only from the level just below it.
After ``step_down_after`` (5) consecutive calls below ``warn_confidence`` the level steps down by
exactly one and the count starts again, so a session that breaks out of its loop recovers gradually.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from detector.core.tuning import ScoringTuning
from detector.settings.vocabulary import ACTIONS as _ACTIONS
from detector.settings.vocabulary import LEVELS as _LEVELS

INJECTION_CONTEXT_AWARE: Final = "context_aware"

__all__ = ["ACTIONS", "ACTION_RANK", "GENERIC_INSTRUCTION", "LEVELS", "LEVEL_ACTION", "LEVEL_RANK", "Escalation",
           "Transition", "break_instruction"]

# The vocabulary's levels and actions as this compiled module's own constants (an imported name is looked up in
# the other module's dict at every use), with their ranks and each level's action.
LEVELS: Final[tuple[str, ...]] = _LEVELS
ACTIONS: Final[tuple[str, ...]] = _ACTIONS
LEVEL_ACTION: Final = dict(zip(LEVELS, ACTIONS, strict=True))
ACTION_RANK: Final = {a: i for i, a in enumerate(ACTIONS)}
LEVEL_RANK: Final = {name: i for i, name in enumerate(LEVELS)}

GENERIC_INSTRUCTION = (
    "Loop detected. You are repeating the same actions without progress. Stop the current approach, "
    "summarize what you have tried, and propose a fundamentally different strategy."
)


@dataclass(frozen=True, slots=True)
class Transition:
    from_level: str
    to_level: str
    consecutive: int

    @property
    def up(self) -> bool:
        return LEVEL_RANK[self.to_level] > LEVEL_RANK[self.from_level]


@dataclass(slots=True)
class Escalation:
    """Level plus the counters that move it. ``streaks[i]`` counts consecutive calls at or above the
    threshold of level ``i + 1`` (warn, throttle, inject, hard_stop); ``below`` counts consecutive calls
    below ``warn_confidence``."""

    level: int = 0
    streaks: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    below: int = 0

    # Written out, as ScopeState's is (detector.core.engine).
    def __init__(self, level: int = 0, streaks: list[int] | None = None, below: int = 0) -> None:
        self.level = level
        self.streaks = [0, 0, 0, 0] if streaks is None else streaks
        self.below = below

    @property
    def level_name(self) -> str:
        return LEVELS[self.level]

    def advance(self, confidence: float, thresholds: tuple[float, ...], counts: tuple[int, ...],
                step_down_after: int) -> Transition | None:
        """Account one scored call; returns the transition it caused, if any. ``thresholds`` and ``counts``:
        the configuration's, per level from warn up (``ScoringTuning.thresholds`` and ``counts``)."""
        streaks = self.streaks
        for i, threshold in enumerate(thresholds):
            streaks[i] = streaks[i] + 1 if confidence >= threshold else 0
        self.below = self.below + 1 if confidence < thresholds[0] else 0
        if self.level == 0 and streaks[0] < counts[0]:
            return None  # the usual call of a calm scope: nothing to climb, nothing to step down from

        if self.level < len(thresholds) and self.streaks[self.level] >= counts[self.level]:
            before = self.level
            self.level += 1
            return Transition(LEVELS[before], LEVELS[self.level], self.streaks[before])
        if self.level > 0 and self.below >= step_down_after:
            consecutive = self.below
            self.level -= 1
            self.below = 0
            return Transition(LEVELS[self.level + 1], LEVELS[self.level], consecutive)
        return None

    def to_dict(self) -> dict[str, object]:
        return {"level": self.level, "streaks": list(self.streaks), "below": self.below}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Escalation:
        return cls(level=int(data["level"]), streaks=[int(x) for x in data["streaks"]], below=int(data["below"]))


def break_instruction(cfg: ScoringTuning, dominant_signal: str, tool_names: tuple[str, ...] = ()) -> str:
    """The text to add to the system prompt on entering inject.

    The configured template wins; ``context_aware`` tailors the text to the dominant signal (naming the
    repeated tool, or telling the model to stop retrying a failing operation); otherwise the generic text.
    """
    if cfg.break_instruction_template:
        return cfg.break_instruction_template
    if cfg.injection_strategy != INJECTION_CONTEXT_AWARE:
        return GENERIC_INSTRUCTION
    if dominant_signal == "tool_call_repetition" and tool_names:
        tools = ", ".join(f"`{name}`" for name in dict.fromkeys(tool_names))
        return (
            f"Loop detected: you have called {tools} repeatedly with the same arguments and it is not making "
            "progress. Do not call it again with the same arguments. Summarize what the results told you and "
            "choose a different tool or approach, or ask the user for guidance."
        )
    if dominant_signal == "error_cycling":
        return (
            "Loop detected: the same operation keeps failing with the same error. Stop retrying it. Explain the "
            "error, what you have tried, and take a different approach or ask the user for help."
        )
    if dominant_signal in ("content_similarity", "response_stagnation"):
        return (
            "Loop detected: your recent responses are nearly identical. Do not repeat yourself. State what is "
            "blocking progress and propose a fundamentally different next step."
        )
    if dominant_signal in ("token_velocity", "cost_velocity", "context_growth"):
        return (
            "Loop detected: this run is consuming tokens fast without new information. Stop, summarize the "
            "progress so far, and finish or ask the user how to proceed."
        )
    return GENERIC_INSTRUCTION
