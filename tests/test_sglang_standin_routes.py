"""The routes the installed SGLang client and the adapter call, read from their source, against the stand-in's.

No server starts here: the client's routes are read from sglang 0.5.23's benchmark/serving.py (ast), the
adapter's from tools/engines/sglang/*.py, the real server's from srt/entrypoints/http_server.py; the
stand-in's are tools/engines/sglang_standin/server.py ROUTES. A route the client or the adapter calls that
the stand-in lacks fails here; so does a stand-in route the real server does not declare.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from tools.engines.sglang_standin.server import ROUTES

ROOT = Path(__file__).resolve().parents[1]
SGLANG = Path(list(importlib.util.find_spec("sglang").submodule_search_locations)[0])
CLIENT = SGLANG / "benchmark" / "serving.py"
HTTP_SERVER = SGLANG / "srt" / "entrypoints" / "http_server.py"
ADAPTER = ROOT / "tools" / "engines" / "sglang"
ROUTE = re.compile(r"^/[A-Za-z0-9_]+(/[A-Za-z0-9_.:-]+)*$")
# The request functions of the SGLang backends (ASYNC_REQUEST_FUNCS) and the profile call post to their URL.
POSTING = ("async_request_sglang_generate", "async_request_openai_completions",
           "async_request_openai_chat_completions", "async_request_profile")


def _tree(path: Path) -> tuple[ast.Module, dict]:
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    return tree, parents


def _ancestors(node, parents):
    while node in parents:
        node = parents[node]
        yield node


def _route_constants(tree):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and ROUTE.match(n.value)]


def _call_method(node, parents) -> str | None:
    """GET/POST of the nearest enclosing ``X.get(...)`` / ``X.post(...)`` call, if any."""
    for up in _ancestors(node, parents):
        if isinstance(up, ast.Call) and isinstance(up.func, ast.Attribute) and up.func.attr in ("get", "post"):
            return up.func.attr.upper()
    return None


def _backend_paths(tree) -> dict[str, str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_BACKEND_API_PATHS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("the client has no _BACKEND_API_PATHS")


def _not_called_for_sglang(node, parents, tree) -> str | None:
    """Why a route string of the client is not a route the client calls on an SGLang generation server, checked
    in the source; None when it is one."""
    value = node.value
    paths = _backend_paths(tree)
    owners = {backend for backend, path in paths.items() if path == value}
    if owners and not any(b.startswith("sglang") and not b.endswith("embedding") for b in owners):
        return f"the API path of backends {sorted(owners)} only (embeddings need an embedding model)"
    for up in _ancestors(node, parents):
        if isinstance(up, ast.If) and "vllm" in ast.unparse(up.test) and node in set(ast.walk(up.body[0])):
            return "vLLM's prefix-cache reset (flush_server_cache's vllm branch)"
        if isinstance(up, ast.Call) and ast.unparse(up.func) in ("os.getenv", "os.environ.get"):
            return "a directory default, not a route"
    return None


def client_routes() -> dict[tuple[str, str], list[int]]:
    """(method, path) -> client source lines, for the routes the installed client calls on an SGLang server."""
    tree, parents = _tree(CLIENT)
    functions = {n.name: ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)}
    for name in POSTING:
        assert "session.post(" in functions[name], f"{name} no longer posts: read the client again"
    assert "requests.get(url" in functions["wait_for_endpoint"]
    routes: dict[tuple[str, str], list[int]] = {}
    for node in _route_constants(tree):
        if isinstance(parents.get(node), ast.JoinedStr) or _not_called_for_sglang(node, parents, tree):
            continue  # an f-string's part: read whole below
        method = _call_method(node, parents) or "POST"  # API paths and profile URLs go to the posting functions
        routes.setdefault((method, node.value), []).append(node.lineno)
    for node in ast.walk(tree):  # model_url = f"{base_url}/v1/models", polled and read with requests.get
        if isinstance(node, ast.JoinedStr) and ast.unparse(node) == "f'{base_url}/v1/models'":
            routes.setdefault(("GET", "/v1/models"), []).append(node.lineno)
    return routes


def adapter_routes() -> dict[tuple[str, str], str]:
    """(method, path) -> file:line of each server route the adapter calls (a route string added to a URL or
    passed to a call), not the router's (a URL named router)."""
    found = {}
    for path in sorted(ADAPTER.glob("*.py")):
        tree, parents = _tree(path)
        for node in _route_constants(tree):
            parent = parents.get(node)
            added = isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add) and parent.right is node
            if not (added or isinstance(parent, ast.Call)):
                continue
            if added and "router" in ast.unparse(parent.left):
                continue
            # a request with a body (urllib's data=) is a POST, as urllib sends it
            method = "POST" if "data=" in ast.unparse(parents.get(parent, parent)) else "GET"
            found[(method, node.value)] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def declared_routes() -> set[tuple[str, str]]:
    """(method, path) the real server declares (@app.get/post/api_route with a constant path)."""
    tree, _ = _tree(HTTP_SERVER)
    declared = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            if not (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute) and ast.unparse(dec.func.value) == "app"):
                continue
            if not (dec.args and isinstance(dec.args[0], ast.Constant)):
                continue
            path = dec.args[0].value
            if dec.func.attr == "api_route":
                methods = next(ast.literal_eval(k.value) for k in dec.keywords if k.arg == "methods")
            else:
                methods = [dec.func.attr.upper()]
            declared |= {(m, path) for m in methods}
    return declared


def test_the_client_routes_are_read_from_its_source():
    """What the reader finds in 0.5.23's client (a change of the client changes this list: read it again)."""
    assert set(client_routes()) == {
        ("POST", "/generate"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
        ("GET", "/model_info"), ("GET", "/server_info"), ("POST", "/flush_cache"), ("POST", "/start_profile"),
        ("POST", "/stop_profile")}


def test_the_stand_in_serves_every_route_the_installed_client_calls():
    missing = {route: lines for route, lines in client_routes().items() if route not in ROUTES}
    assert not missing, f"routes the client calls (serving.py lines) that the stand-in lacks: {missing}"


def test_the_stand_in_serves_every_route_the_adapter_calls():
    routes = adapter_routes()
    assert ("GET", "/health") in routes and ("POST", "/start_profile") in routes
    missing = {route: where for route, where in routes.items() if route not in ROUTES}
    assert not missing, f"routes the adapter calls that the stand-in lacks: {missing}"


def test_every_stand_in_route_is_one_the_real_server_declares():
    declared = declared_routes()
    assert ("GET", "/health") in declared and ("POST", "/generate") in declared  # the reader works
    invented = sorted(set(ROUTES) - declared)
    assert not invented, f"stand-in routes sglang 0.5.23's http_server.py does not declare: {invented}"
