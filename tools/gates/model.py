"""Records of a gate scan. All plain data (JSON-ready through `to_dict`), sorted deterministically."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# NVIDIA compute capabilities (major*10 + minor: (10, 7) is 107, (8, 7) is 87) the scan evaluates
# every gate on: CUDA's documented set, sm_107 included (sglang 0.5.23 tests `(major, minor) ==
# (10, 7)` and `get_device_sm() == 107`), and the older parts an engine may still gate on.
SM_VERSIONS = (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 107, 110, 120, 121)

# What the side of a gate taken when its test is true does: "enables" a path (the SMs on which the
# test is true get it), or "exits" (an early return/raise/continue/break: the SMs that take it are
# shut out, the others pass through to what follows).
ENABLES, EXITS = "enables", "exits"


def sm_of(major: int, minor: int) -> int:
    """The SM number of a compute capability: major*10 + minor ((10, 7) -> 107, (12, 0) -> 120)."""
    return int(major) * 10 + int(minor)


def capability_of(sm: int) -> tuple[int, int]:
    """The (major, minor) of an SM number, the inverse of `sm_of` (minor is one digit)."""
    return divmod(int(sm), 10)


@dataclass
class BranchPath:
    """What one side of a gate leads to: `names` are the imported modules/functions, called
    functions and assigned names found there (most specific first); `text` a one-line summary."""

    kind: str  # import | call | assign | return | raise | continue | empty
    names: list
    text: str


@dataclass
class EnvUse:
    name: str
    default: Any
    defined_at: str | None
    # value -> SMs on which the test is true with the variable set to that value (others at default)
    passes_with: dict = field(default_factory=dict)


@dataclass
class HelperUse:
    name: str
    defined_at: str
    sms: list  # SMs on which the helper can answer true (or a non-boolean value's SMs where it is truthy)


@dataclass
class Gate:
    """One place where the engine's behaviour depends on the architecture (or on an environment
    switch that selects between architecture-specific paths)."""

    id: str  # file:line:col of the test
    file: str
    line: int
    kind: str  # call | attr | const | env | assert
    kinds: list  # every way the architecture/environment enters the test
    test: str
    function: str | None
    statement: str  # if | elif | ifexp | assert | while
    sms_true: list  # SMs on which the test is true whatever else holds
    sms_maybe: list  # SMs on which it can be true, depending on `conditions`
    sms_unknown: list  # SMs for which the scan could not tell
    helpers: list  # [HelperUse]
    env: list  # [EnvUse]
    conditions: list  # what else the test depends on (source text), non-architectural
    when_true: BranchPath
    when_false: BranchPath
    under: list  # enclosing gates: [{"gate": id, "branch": bool}]
    notes: list  # assumptions applied while evaluating
    role: str = ENABLES  # ENABLES | EXITS: what the true side does (see ENABLES above)

    @property
    def sms(self) -> list:
        return sorted(set(self.sms_true) | set(self.sms_maybe))


@dataclass
class Helper:
    """A callable of the tree whose answer depends on the compute capability."""

    name: str
    module: str
    defined_at: str
    sms: list  # SMs on which it returns a truthy value (definitely or depending on conditions)
    sms_definite: list
    values: dict  # SM -> value as text, for non-boolean helpers (e.g. get_device_sm)
    conditions: list
    env: list  # names of environment variables it reads


@dataclass
class Constant:
    """A module-level name or instance attribute computed from the architecture or environment."""

    name: str
    defined_at: str
    sms: list
    sms_definite: list
    env: list
    conditions: list


@dataclass
class ImportProbe:
    id: str
    file: str
    line: int
    modules: list
    function: str | None
    under: list  # enclosing gates


@dataclass
class EnvSwitch:
    """An environment variable that selects or is set for an architecture-specific path."""

    name: str
    default: Any
    defined_at: str | None
    read_by: list  # gate ids / constant locations
    set_at: list  # [{"at": file:line, "value": text, "under": [...]}]


@dataclass
class Unresolved:
    at: str
    text: str
    reason: str


@dataclass
class GateRow:
    """A gate evaluated for one SM.

    `passes` says whether the SM gets through to `guarded` (the enabled path, or for an early-exit
    guard what follows the exit); `alternative` is what it gets otherwise. `sms` are the SMs on
    which the test can be true, `allows` those that can pass (the same for "enables", the
    complement for "exits"). `decided_by` is "env" when the SM does not change the answer (an
    environment switch does), else "sm"."""

    id: str
    file: str
    line: int
    kind: str
    test: str
    helper: str | None
    sms: list
    passes: bool | None
    definite: bool
    guarded: str
    alternative: str
    conditions: list
    env: list
    role: str  # ENABLES | EXITS
    allows: list
    decided_by: str  # "sm" | "env"


@dataclass
class GateScan:
    root: str
    engine: dict  # {"package": name, "version": version or None}
    sm_versions: list
    cuda: str | None
    files_scanned: int
    files_interpreted: int
    helpers: list
    constants: list
    gates: list
    import_probes: list
    env: list
    unresolved: list
    # The live interpreter state behind this scan (not serialised): lets kernel ties evaluate
    # tests that are not gates, and answer for environments other than the default.
    state: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        """Plain JSON-ready data (dict keys as strings; dump with sort_keys for a stable form)."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "state"}
        return _jsonable(data)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {name: _jsonable(getattr(value, name)) for name in value.__dataclass_fields__}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def from_dict(data: dict) -> GateScan:
    """Rebuild a GateScan from its `to_dict()` form (without the live state)."""

    def branch(d):
        return BranchPath(**d)

    gates = []
    for g in data["gates"]:
        g = dict(g)
        g["helpers"] = [HelperUse(**h) for h in g["helpers"]]
        g["env"] = [EnvUse(**e) for e in g["env"]]
        g["when_true"] = branch(g["when_true"])
        g["when_false"] = branch(g["when_false"])
        gates.append(Gate(**g))
    return GateScan(
        root=data["root"],
        engine=data["engine"],
        sm_versions=data["sm_versions"],
        cuda=data.get("cuda"),
        files_scanned=data["files_scanned"],
        files_interpreted=data["files_interpreted"],
        helpers=[Helper(**h) for h in data["helpers"]],
        constants=[Constant(**c) for c in data["constants"]],
        gates=gates,
        import_probes=[ImportProbe(**p) for p in data["import_probes"]],
        env=[EnvSwitch(**e) for e in data["env"]],
        unresolved=[Unresolved(**u) for u in data["unresolved"]],
    )
