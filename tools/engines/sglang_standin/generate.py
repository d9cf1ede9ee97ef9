"""/generate, /v1/completions and /v1/chat/completions: requests into the scheduler, its tokens out as SGLang sends them.

/generate (srt/entrypoints/http_server.py generate_request; srt/managers/tokenizer_manager.py, the
non-incremental stream, SGLang's default): every event has the cumulative ``text`` and ``output_ids`` and
``meta_info`` (id, finish_reason (null until the last: {"type": "length", "length": N}), prompt_tokens,
weight_version, num_retractions, reasoning_tokens, completion_tokens, cached_tokens, and e2e_latency on
the last), then ``data: [DONE]``. The OpenAI routes stream deltas (srt/entrypoints/openai serving_*):
``choices[0].text`` / ``choices[0].delta.content``, finish_reason "length" on the last, a usage chunk
when ``stream_options.include_usage``. One prompt per request (a batch of prompts is refused, 400).
"""

from __future__ import annotations

import time
from http import HTTPStatus

from . import pd
from .replies import Reply, Stream
from .scheduler import Request

# How long a decode server's request waits for its KV from the prefill server (pd.py role.receive).
RECEIVE_TIMEOUT_S = 120.0


class _Failed(RuntimeError):
    pass


def _admit(app, body: dict, prompt_len: int, max_new_tokens: int) -> Request | Reply:
    """The request queued in the scheduler, through the disaggregation role when the server has one
    (pd.py, H4's interface): a prefill server's request ends after its first token; a decode server's
    waits for its KV, then joins the running batch with the prefill's first token."""
    role = app.role
    if role is None:
        return app.submit(Request(prompt_len=prompt_len, max_new_tokens=max_new_tokens))
    try:
        ticket = role.admit(body)
    except pd.BadRequest as exc:
        return _bad(str(exc))
    if role.mode == "prefill":
        req = Request(prompt_len=prompt_len, max_new_tokens=max_new_tokens, prefill_only=True, ticket=ticket)
        return app.submit(req)
    try:
        kv = role.receive(ticket, RECEIVE_TIMEOUT_S)
    except pd.TransferFailed as exc:
        return Reply({"error": {"message": str(exc), "type": "internal_error", "code": 500}},
                     HTTPStatus.INTERNAL_SERVER_ERROR)
    first = kv["first_token_id"]
    if first is None:  # a fake transfer (pd.py): no prefill server sent a token; SGLang decodes on regardless
        first = app.vocab.token_of(0, 0)
    req = Request(prompt_len=prompt_len, max_new_tokens=max_new_tokens, prebuilt=True, ticket=ticket,
                  output_ids=[first])
    return app.submit(req)


def _bad(message: str) -> Reply:
    return Reply({"error": {"message": message, "type": "invalid_request_error", "code": 400}}, HTTPStatus.BAD_REQUEST)


def _updates(app, req):
    """(token count, finished) after each iteration that gave ``req`` tokens; raises _Failed. A prefill
    server's request is handed off to its decode server before its last update."""
    while True:
        kind, count = req.events.get()
        if kind == "error":
            raise _Failed(count)
        if kind == "done" and req.prefill_only:
            app.role.handed_off(req.ticket, prompt_tokens=req.prompt_len, first_token_id=req.output_ids[0])
        yield count, kind == "done"
        if kind == "done":
            return


def _prompt_len(app, prompt) -> int | None:
    """Tokens of one prompt (a text or a list of ids); None when it is not one prompt."""
    if isinstance(prompt, str):
        return app.vocab.count(prompt)
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    return None


def _meta(req, count: int, finished: bool) -> dict:
    # a prefill server finishes its requests with length 0 (sglang srt/disaggregation/prefill.py)
    length = 0 if req.prefill_only else count
    # the keys, in the order, of the real 0.5.17 server's answer (tests/data/real-sglang-0517-h100/smoke.json);
    # 0.5.23's tokenizer_manager.py sets the same (dp_rank from the scheduler's dp_ranks, None without DP
    # attention; response_sent_to_client_ts on the last, wall-clock seconds)
    meta = {"id": req.rid, "finish_reason": {"type": "length", "length": length} if finished else None,
            "prompt_tokens": req.prompt_len, "weight_version": "default", "num_retractions": 0,
            "reasoning_tokens": 0, "completion_tokens": count, "cached_tokens": 0, "cached_tokens_details": None,
            "dp_rank": None}
    if finished:
        meta["e2e_latency"] = req.e2e_latency()
        meta["response_sent_to_client_ts"] = time.time()
    return meta


def _native_out(app, req, count: int, finished: bool) -> dict:
    ids = req.output_ids[:count]
    out = {"output_ids": ids, "meta_info": _meta(req, count, finished)}
    # with --skip-tokenizer-init SGLang sends token ids only (BatchTokenIDOutput, no detokenizer), as the real
    # 0.5.17 server answered
    return out if app.args.skip_tokenizer_init else {"text": app.vocab.text(ids), **out}


def native(app, body) -> Reply | Stream:
    if not isinstance(body, dict):
        return _bad("the body must be a JSON object")
    prompt = body.get("input_ids") if body.get("input_ids") is not None else body.get("text")
    if prompt is None:
        return _bad("Either text or input_ids should be provided.")
    prompt_len = _prompt_len(app, prompt)
    if prompt_len is None:
        return _bad("the stand-in serves one prompt per request (text: a string, input_ids: a list of ints)")
    params = body.get("sampling_params") or {}
    req = _admit(app, body, prompt_len, int(params.get("max_new_tokens", 128)))
    if isinstance(req, Reply):
        return req
    if body.get("stream"):
        return Stream(_native_events(app, req))
    try:
        count = [c for c, _ in _updates(app, req)][-1]
    except _Failed as exc:
        return Reply({"error": {"message": str(exc), "type": "internal_error", "code": 500}}, HTTPStatus.INTERNAL_SERVER_ERROR)
    return Reply(_native_out(app, req, count, True))


def _native_events(app, req):
    try:
        for count, finished in _updates(app, req):
            yield _native_out(app, req, count, finished)
    except _Failed as exc:
        yield {"error": {"message": str(exc), "type": "invalid_request_error", "code": 400, "retryable": False}}


def _usage(req, count: int) -> dict:
    return {"prompt_tokens": req.prompt_len, "completion_tokens": count, "total_tokens": req.prompt_len + count}


def _openai(app, body, prompt, chat: bool) -> Reply | Stream:
    prompt_len = _prompt_len(app, prompt)
    if prompt_len is None:
        return _bad("the stand-in serves one prompt per request")
    req = _admit(app, body, prompt_len, int(body.get("max_completion_tokens") or body.get("max_tokens") or 16))
    if isinstance(req, Reply):
        return req
    head = {"id": req.rid, "created": int(time.time()), "model": body.get("model") or app.model_name}
    if body.get("stream"):
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return Stream(_openai_events(app, req, head, chat, usage))
    try:
        count = [c for c, _ in _updates(app, req)][-1]
    except _Failed as exc:
        return Reply({"error": {"message": str(exc), "type": "internal_error", "code": 500}}, HTTPStatus.INTERNAL_SERVER_ERROR)
    text = app.vocab.text(req.output_ids[:count])
    choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"} if chat else
              {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "matched_stop": None})
    return Reply({**head, "object": "chat.completion" if chat else "text_completion", "choices": [choice],
                  "usage": _usage(req, count)})


def _openai_events(app, req, head: dict, chat: bool, usage: bool):
    sent, count = "", 0
    try:
        for count, finished in _updates(app, req):
            text = app.vocab.text(req.output_ids[:count])
            delta, sent = text[len(sent):], text
            reason = "length" if finished else None
            choice = ({"index": 0, "delta": {"role": "assistant", "content": delta}, "finish_reason": reason} if chat else
                      {"index": 0, "text": delta, "logprobs": None, "finish_reason": reason, "matched_stop": None})
            yield {**head, "object": "chat.completion.chunk" if chat else "text_completion", "choices": [choice],
                   "usage": None}
    except _Failed as exc:
        yield {"error": {"message": str(exc), "type": "invalid_request_error", "code": 400}}
        return
    if usage:
        yield {**head, "object": "chat.completion.chunk" if chat else "text_completion", "choices": [],
               "usage": _usage(req, count)}


def completions(app, body) -> Reply | Stream:
    if not isinstance(body, dict) or body.get("prompt") is None:
        return _bad("prompt is required")
    return _openai(app, body, body["prompt"], chat=False)


def chat(app, body) -> Reply | Stream:
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return _bad("messages is required")
    text = "\n".join(str(m.get("content") or "") for m in body["messages"] if isinstance(m, dict))
    return _openai(app, body, text, chat=True)
