"""Secrets out of everything a run writes: the journal, command lines, findings, artifacts, report.

A secret is the value of an environment variable whose name looks secret (``HF_TOKEN``,
``OPENAI_API_KEY``, ``DB_PASSWORD``; ``looks_secret``). Two rules apply together:

* by name: in an environment mapping (keys spelled like environment variables), a secret name's
  value becomes ``PLACEHOLDER``;
* by value: every known secret value (of this process's environment, which the box passes on, and
  of the target's environment, ``remember``) is replaced by ``PLACEHOLDER`` wherever it occurs in a
  string, so a tool that echoes it (an argv, a stderr tail) does not carry it into the journal.

The run records the target with its secrets redacted (``redact_target``); the real values exist
only in memory and reach the box at the last moment (``resolve_env``), so neither the journal, the
checkpoint, nor a replay (which recomputes from the recorded target) ever sees them.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

PLACEHOLDER = "[redacted]"
# Parts of a variable name (split at "_") that make it secret. PWD (the working directory) is not one.
SECRET_PARTS = {"TOKEN", "TOKENS", "KEY", "KEYS", "APIKEY", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASS",
                "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "AUTH", "PRIVATE", "COOKIE"}
SECRET_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "APIKEY")
# Shorter values are not scrubbed by value (they would hit digests and ordinary words); by name they are.
MIN_VALUE_LENGTH = 8
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

_remembered: set[str] = set()


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret."""
    if not _ENV_NAME.match(name):
        return False
    parts = [p for p in name.upper().split("_") if p]
    return any(p in SECRET_PARTS or p.endswith(SECRET_SUFFIXES) for p in parts)


def _env_like(name: Any) -> bool:
    """Keys of environment mappings are spelled as variables are: upper case (journal keys are not)."""
    return isinstance(name, str) and bool(_ENV_NAME.match(name)) and name == name.upper()


def secret_env(env: Mapping[str, str]) -> dict[str, str]:
    """The secret entries of an environment."""
    return {k: v for k, v in env.items() if looks_secret(k) and isinstance(v, str) and v and v != PLACEHOLDER}


def remember(values) -> None:
    """Secret values to scrub from now on in this process (the target's, once loaded)."""
    _remembered.update(v for v in values if isinstance(v, str) and len(v) >= MIN_VALUE_LENGTH)


def known_values() -> list[str]:
    """Every secret value known now, longest first (so a value containing another goes whole)."""
    values = set(_remembered)
    values.update(v for v in secret_env(os.environ).values() if len(v) >= MIN_VALUE_LENGTH)
    return sorted(values, key=lambda v: (-len(v), v))


def scrub_text(text: str, values: list[str] | None = None) -> str:
    for value in known_values() if values is None else values:
        if value in text:
            text = text.replace(value, PLACEHOLDER)
    return text


def scrub(obj: Any, values: list[str] | None = None) -> Any:
    """``obj`` (JSON data) with secrets redacted by name and by value; equal to ``obj`` when it has none."""
    values = known_values() if values is None else values
    if isinstance(obj, str):
        return scrub_text(obj, values)
    if isinstance(obj, dict):
        return {key: (PLACEHOLDER if _env_like(key) and looks_secret(key) and isinstance(value, str)
                      else scrub(value, values))
                for key, value in obj.items()}
    if isinstance(obj, list):
        return [scrub(item, values) for item in obj]
    if isinstance(obj, tuple):
        return tuple(scrub(item, values) for item in obj)
    return obj


def scrub_bytes(data: bytes, values: list[str] | None = None) -> bytes:
    """A file's bytes with every known secret value replaced (artifacts the box sent back)."""
    for value in known_values() if values is None else values:
        encoded = value.encode()
        if encoded in data:
            data = data.replace(encoded, PLACEHOLDER.encode())
    return data


def target_secrets(target) -> dict[str, str]:
    """The secret environment values a target carries (the engine's and every lever's)."""
    found = dict(secret_env(target.engine.env))
    for lever in target.levers:
        found.update(secret_env(lever.env))
    return found


def redact_target(target):
    """The target as a run records it (journal, checkpoint, findings): secret environment values
    replaced by PLACEHOLDER, and every known secret value (its own, the process's) wherever else it
    was pasted (a description, a note)."""
    def env(mapping):
        return {k: PLACEHOLDER if k in secret_env(mapping) else v for k, v in mapping.items()}

    engine = target.engine.model_copy(update={"env": env(target.engine.env)})
    levers = [lever.model_copy(update={"env": env(lever.env)}) for lever in target.levers]
    named = target.model_copy(update={"engine": engine, "levers": levers})
    values = known_values() + [v for v in target_secrets(target).values() if v not in known_values()]
    return type(target).model_validate(scrub(named.model_dump(mode="json"), values))


def resolve_env(env: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    """The environment a tool really runs with: each PLACEHOLDER back to its secret. A secret this
    process no longer has (a resume whose target file changed) is left out, so the variable the
    box inherits from the process environment, if any, applies instead of the placeholder."""
    resolved = {}
    for name, value in env.items():
        if value != PLACEHOLDER:
            resolved[name] = value
        elif name in secrets:
            resolved[name] = secrets[name]
    return resolved


_SECRET_KEY_IN_JSON = re.compile(r'"([A-Z0-9_]+)"\s*:\s*"')


def scrub_event(event: dict[str, Any]) -> dict[str, Any]:
    """A journal event with its secrets redacted (``scrub``); the event itself when it has none,
    found by one look at its encoded text, so ordinary events cost a string search."""
    import json

    values = known_values()
    text = json.dumps(event, ensure_ascii=False)
    if not any(v in text for v in values) and not any(
            looks_secret(m.group(1)) for m in _SECRET_KEY_IN_JSON.finditer(text)):
        return event
    return scrub(event, values)


def scrub_file(path) -> bool:
    """Redact known secret values in a file in place (an artifact before it is stored); True if changed."""
    from pathlib import Path

    path = Path(path)
    values = known_values()
    if not values:
        return False
    data = path.read_bytes()
    clean = scrub_bytes(data, values)
    if clean == data:
        return False
    path.write_bytes(clean)
    return True


def resolve(obj: Any, secrets: Mapping[str, str]) -> Any:
    """Tool arguments as the box must get them: every secret entry of an environment mapping that
    the recorded target holds as PLACEHOLDER gets its real value back (``resolve_env``, at any depth:
    a sweep's spec carries each run's environment)."""
    if isinstance(obj, dict):
        if any(value == PLACEHOLDER and _env_like(key) for key, value in obj.items()):
            obj = resolve_env(obj, secrets)
        return {key: resolve(value, secrets) for key, value in obj.items()}
    if isinstance(obj, list):
        return [resolve(item, secrets) for item in obj]
    return obj


def secrets_for_resume(events: list[dict[str, Any]]) -> dict[str, str]:
    """A resumed run's secret values: from its target file again (the journal holds none). Empty when
    the file is gone or no longer loads; ``resolve_env`` then leaves the variables to the process."""
    from agent.config import TargetError, load_target

    start = next((e for e in events if e.get("kind") == "run_start"), {})
    try:
        target, _ = load_target(start.get("target_path", ""))
    except (TargetError, OSError):
        return {}
    secrets = target_secrets(target)
    remember(secrets.values())
    return secrets
