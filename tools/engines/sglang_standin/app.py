"""The server's state the HTTP handlers read: its args, scheduler, vocabulary, disaggregation role, ranks."""

from __future__ import annotations

import json
import os
import time

from . import planted
from .scheduler import Request


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def args_dict(args) -> dict:
    """sglang's ServerArgs fields as given (unresolved), as plain JSON values: what /server_info lists first."""
    from sglang.srt.arg_groups.arg_utils import record_fields

    return {f.name: _jsonable(getattr(args, f.name, None)) for f in record_fields(type(args))}


class App:
    """What a handler needs; ``status`` is "Starting" until the warm-up request has run, then "Up"."""

    def __init__(self, args, scheduler, vocab, role, spec, effects, ranks: list[dict], argv: list[str]):
        self.args, self.scheduler, self.vocab, self.role = args, scheduler, vocab, role
        self.spec, self.effects, self.ranks, self.argv = spec, effects, ranks, argv
        self.status = "Starting"
        self.started = time.time()
        self.model_name = args.served_model_name or args.model_path
        self.context_len = spec.context_len
        self.extra_routes = dict(getattr(role, "routes", None) or {})
        # sglang 0.5.23 environ.py:344 SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION (default true): /health generates
        self.health_generates = os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower() not in (
            "0", "false", "no", "off")

    def submit(self, req: Request) -> Request:
        self.scheduler.submit(req)
        return req

    def scheduler_request(self, prompt_len: int, max_new_tokens: int) -> Request:
        """A request of the server's own (health, warm-up): no disaggregation, whatever the role."""
        return self.submit(Request(prompt_len=prompt_len, max_new_tokens=max_new_tokens))

    def model_info(self) -> dict:
        args = self.args
        return {"model_path": args.model_path, "served_model_name": self.model_name,
                "tokenizer_path": args.tokenizer_path or args.model_path, "is_generation": True,
                "preferred_sampling_params": None, "weight_version": "default", "load_format": args.load_format,
                "reasoning_parser": None, "tool_call_parser": None, "disaggregation_mode": args.disaggregation_mode,
                "has_image_understanding": False, "has_audio_understanding": False, "model_type": None,
                "architectures": None, "server": "stand-in"}

    def server_info(self) -> dict:
        from sglang.version import __version__

        counts = self.scheduler.counts()
        return {**args_dict(self.args), "launch_command": self.argv, "server": "stand-in",
                "standin": {"spec": self.spec.model_dump(), "ranks": self.ranks, "effects": list(self.effects.notes),
                            "planted": {"scheduler_overhead_ms": planted.SCHEDULER_OVERHEAD_MS * self.effects.scale,
                                        "eager_decode_delay_ms": planted.EAGER_DECODE_DELAY_MS * self.effects.scale,
                                        "oom_mem_fraction": planted.OOM_MEM_FRACTION, "scale": self.effects.scale},
                            **({"disaggregation": self.role.server_info()} if self.role else {})},
                "internal_states": [{**counts, "avg_spec_accept_length": None}],
                "startup_time": self.started, "version": __version__, "frontend": "python"}
