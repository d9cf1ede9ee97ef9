"""The SGLang adapter, box side: check a deployment's arguments against the installed SGLang, run lever sweeps
and profiles against live servers it launches (``python -m tools.engines.sglang``; see __main__.py).

Imports only the standard library and what the box has (the installed sglang and its client's dependencies);
never ``agent.*``.
"""
