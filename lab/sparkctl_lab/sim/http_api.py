"""vLLM's OpenAI-compatible HTTP API on the standard library's ThreadingHTTPServer.

Routes: /health, /ping, /version, /v1/models, /v1/completions, /v1/chat/completions (streaming
as server-sent events over chunked transfer encoding, `stream_options.include_usage`), the
Anthropic /v1/messages and /v1/messages/count_tokens (anthropic_api.py), the Responses API's
/v1/responses (responses_api.py),
/tokenize, /metrics, and /sim/state (simulator-only: configuration and acceptance model).
Errors use vLLM 0.33's shapes (entrypoints/serve/exception_handling/): a vLLM error is
{"error": {"message": str(exc), "type": "BadRequestError" | "NotFoundError" | ..., "param", "code"}}
(a VLLMValidationError's str() appends "(parameter=..., value=...)"); a request FastAPI cannot
validate (bad JSON, wrong types) is type "Bad Request" with "N validation error(s):" and pydantic's
error dicts; an unknown route or method is FastAPI's {"detail": "Not Found" | "Method Not Allowed"}.
Access lines are uvicorn's (no vLLM prefix).
"""

from __future__ import annotations

import http.server
import json
import math
import queue
import select
import socket
import time
import uuid
from http import HTTPStatus

from . import anthropic_api, responses_api, vlog
from .engine import EngineDead, Request
from .workload import TextStream, classify, last_user_text, render_chat, seed_for, token_ids

DISCONNECT_POLL = 0.5  # seconds between looks at a waiting non-streaming client's connection


# entrypoints/serve/middleware/authenticate.py: the paths --api-key guards
GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")


class ApiError(Exception):
    def __init__(self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.err_type, self.param = status, message, err_type, param


def error_body(status: int, message: str, err_type: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


def vllm_validation_error(message: str, parameter: str | None = None, value=None) -> ApiError:
    """A VLLMValidationError (vllm/exceptions.py) as create_error_response() sends it: str(exc) appends its extras."""
    extras = [f"parameter={parameter}"] if parameter is not None else []
    if value is not None:
        extras.append(f"value={value}")
    return ApiError(400, f"{message} ({', '.join(extras)})" if extras else message, "BadRequestError", parameter)


def _summarize(value):
    # exception_handling/handlers/validation.py _summarize_error_input()
    if isinstance(value, str):
        return value[:200] + "...[truncated]" if len(value) > 200 else value
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    return str(value)


def request_validation_error(errors: list[dict]) -> ApiError:
    """FastAPI's RequestValidationError through vLLM's validation_exception_handler: type "Bad Request",
    "N validation error(s):" then each pydantic error dict (loc joined with dots, input summarized)."""
    shown = []
    for err in errors:
        err = dict(err)
        err["loc"] = ".".join(str(p) for p in err["loc"])
        if "input" in err:
            err["input"] = _summarize(err["input"])
        shown.append(str(err))
    label = "error" if len(errors) == 1 else "errors"
    message = f"{len(errors)} validation {label}:\n" + "".join(f"  {e}\n" for e in shown)
    param = next((e["ctx"]["parameter"] for e in errors if e.get("ctx", {}).get("parameter")), None)
    return ApiError(400, message.rstrip(), "Bad Request", param or ".".join(str(p) for p in errors[0]["loc"]))


# Routes and their methods, as FastAPI routes them (a known path with another method is a 405).
ROUTE_METHODS = {
    "/health": {"GET"},
    "/ping": {"GET", "POST"},
    "/version": {"GET"},
    "/metrics": {"GET"},
    "/load": {"GET"},
    "/v1/models": {"GET"},
    "/v1/completions": {"POST"},
    "/v1/chat/completions": {"POST"},
    "/v1/messages": {"POST"},
    "/v1/messages/count_tokens": {"POST"},
    "/v1/responses": {"POST"},
    "/tokenize": {"POST"},
    "/sim/state": {"GET"},
}


class SimHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, runtime):
        self.runtime = runtime
        if ":" in (address[0] or ""):
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler, bind_and_activate=False)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    # ---- plumbing ----
    def setup(self):
        super().setup()
        # Headers and body are separate writes: without this, Nagle + delayed ACK add ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @property
    def rt(self):
        return self.server.runtime

    def log_message(self, format, *args):  # noqa: A002 - base class signature
        pass

    def _access(self, status: int) -> None:
        if self.rt.cfg.disable_access_log:
            return
        host, port = self.client_address[:2]
        vlog.plain(
            f'INFO:     {host}:{port} - "{self.command} {self.path} {self.request_version}" {status} {HTTPStatus(status).phrase}'
        )

    def _send(self, status: int, body: bytes, ctype: str = "application/json", headers: dict | None = None) -> None:
        self.send_response_only(status)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-length", str(len(body)))
        self.send_header("content-type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self._access(status)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj).encode())

    def _error(self, e: ApiError) -> None:
        if self._messages_api:
            return self._json(e.status, anthropic_api.error_body(e.message))
        self._json(e.status, error_body(e.status, e.message, e.err_type, e.param))

    def _body(self) -> dict:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        self._body_read = True
        try:
            data = json.loads(raw or b"{}")
        except json.JSONDecodeError as e:
            # fastapi/routing.py: a body that is not JSON
            raise request_validation_error(
                [
                    {
                        "type": "json_invalid",
                        "loc": ("body", e.pos),
                        "msg": "JSON decode error",
                        "input": {},
                        "ctx": {"error": e.msg},
                    }
                ]
            ) from None
        if not isinstance(data, dict):
            raise request_validation_error(
                [
                    {
                        "type": "model_attributes_type",
                        "loc": ("body",),
                        "input": data,
                        "msg": "Input should be a valid dictionary or object to extract fields from",
                    }
                ]
            )
        return data

    def _not_routed(self, path: str) -> None:
        """FastAPI's own answer for a path or method no route takes (not vLLM's error shape)."""
        methods = ROUTE_METHODS.get(path)
        if methods is None:
            return self._json(404, {"detail": "Not Found"})
        self._send(405, json.dumps({"detail": "Method Not Allowed"}).encode(), headers={"allow": ", ".join(sorted(methods))})

    def _check_key(self) -> bool:
        """entrypoints/serve/middleware/authenticate.py AuthenticationMiddleware: before any route, every
        path under a guarded prefix needs `Authorization: Bearer <key>` (scheme in any case); else a 401
        with `{"error": "Unauthorized"}` (not vLLM's error shape). True when the request may go on."""
        keys = self.rt.api_keys
        if not keys or not self.path.split("?", 1)[0].startswith(GUARDED_PREFIX):
            return True
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token in keys:
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    # ---- routes ----
    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        self._answer(self._get)

    def do_POST(self):
        self._answer(self._post)

    def _answer(self, route) -> None:
        """Run the method's routes on the path: an ApiError in vLLM's shape; a client gone away gets nothing."""
        self._body_read = False
        self._messages_api = False  # the Anthropic Messages API: its own shapes
        self._responses: dict | None = None  # a Responses-API request (its body): its own shapes
        try:
            if self.command != "OPTIONS" and not self._check_key():
                return
            route(self.path.split("?", 1)[0])
        except ApiError as e:
            self._error(e)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self._discard_unread_body()

    def _discard_unread_body(self) -> None:
        """A body no route read (a 404, 405, 401, POST /ping) is read off the connection, as uvicorn
        does: left there, a keep-alive client's next request would be parsed from its bytes."""
        length = int(self.headers.get("content-length") or 0)
        if length and not self._body_read:
            try:
                self.rfile.read(length)
            except OSError:
                pass

    def _get(self, path: str) -> None:
        if path in ("/health", "/ping"):
            return self._health()
        if path == "/version":
            return self._json(200, {"version": self.rt.knobs.vllm_version})
        if path == "/metrics":
            return self._send(200, self.rt.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")
        if path == "/v1/models":
            return self._json(200, self.rt.models_payload())
        if path == "/load":
            return self._json(200, {"server_load": self.rt.engine.num_unfinished()})
        if path == "/sim/state":
            return self._json(200, self.rt.sim_state())
        self._not_routed(path)

    def _post(self, path: str) -> None:
        if path == "/ping":
            return self._health()
        if path in ("/v1/completions", "/v1/chat/completions"):
            return self._generate(self._body(), chat=path.endswith("chat/completions"))
        if path == "/v1/messages":
            self._messages_api = True
            return self._generate(anthropic_api.as_chat(self._body()), chat=True)
        if path == "/v1/responses":
            self._responses = self._body()
            return self._generate(responses_api.as_chat(self._responses), chat=True)
        if path == "/v1/messages/count_tokens":
            self._messages_api = True
            body = anthropic_api.as_chat(self._body())
            text = render_chat(body["messages"], **_template_kwargs(body))
            return self._json(200, {"input_tokens": len(token_ids(text))})
        if path == "/tokenize":
            body = self._body()
            text = render_chat(body["messages"], **_template_kwargs(body)) if "messages" in body else body.get("prompt", "")
            ids = token_ids(text)
            return self._json(200, {"count": len(ids), "max_model_len": self.rt.max_model_len, "tokens": ids, "token_strs": None})
        self._not_routed(path)

    def _health(self):
        self._send(200 if self.rt.healthy() else 503, b"", "application/json")

    # ---- generation ----
    def _generate(self, body: dict, chat: bool) -> None:
        rt = self.rt
        # No check of rt.draining here: vLLM 0.33's API server validates and submits as usual during its
        # drain and EngineCore finishes the request at once, empty, as aborted (engine.py Engine.add).
        if body.get("stream_options") and not body.get("stream"):
            # completion/protocol.py validate_stream_options (a model_validator: pydantic wraps the VLLMValidationError)
            msg = "Stream options can only be defined when `stream=True`."
            raise request_validation_error(
                [
                    {
                        "type": "value_error",
                        "loc": ("body",),
                        "msg": f"Value error, {msg}",
                        "input": body,
                        "ctx": {"error": f"{msg} (parameter=stream_options)", "parameter": "stream_options"},
                    }
                ]
            )
        model = body.get("model")
        if model is not None and model not in rt.cfg.served_model_names:
            # entrypoints/serve/engine/serving.py _check_model()
            raise ApiError(
                404,
                f"The model `{model}` does not exist. Valid aliases: {', '.join(rt.cfg.served_model_names)}.",
                "NotFoundError",
                "model",
            )
        model = model or rt.cfg.served_model_name
        n = body.get("n") or 1
        if n != 1:
            raise ApiError(400, "The simulator serves n=1 only.", "BadRequestError", "n")
        if chat:
            messages = body.get("messages")
            if messages is None:
                raise request_validation_error(
                    [{"type": "missing", "loc": ("body", "messages"), "msg": "Field required", "input": body}]
                )
            if not isinstance(messages, list) or not messages:
                raise ApiError(400, "messages must be a non-empty list", "BadRequestError", "messages")
            prompt_text = render_chat(messages, **_template_kwargs(body))
            topic = last_user_text(messages)
            # chat_completion/protocol.py build_tok_params(): max_completion_tokens wins when given
            limit_param = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
            max_tokens = body.get(limit_param)
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
                if len(prompt) != 1:
                    raise ApiError(400, "The simulator serves one prompt per request.", "BadRequestError", "prompt")
                prompt = prompt[0]
            if isinstance(prompt, list) and all(isinstance(p, int) for p in prompt):
                prompt = " ".join(f"t{p}" for p in prompt)
            if not isinstance(prompt, str):
                raise ApiError(400, "Either prompt or prompt_embeds must be provided and non-empty.", "BadRequestError", "prompt")
            prompt_text = topic = prompt
            limit_param = "max_tokens"
            max_tokens = body.get("max_tokens", 16)
        L = rt.max_model_len
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)):
            raise request_validation_error(
                [
                    {
                        "type": "int_parsing",
                        "loc": ("body", limit_param),
                        "input": max_tokens,
                        "msg": "Input should be a valid integer, unable to parse string as an integer",
                    }
                ]
            )
        if max_tokens is not None and max_tokens > L:
            # renderers/params.py TokenizeParams.__post_init__: before the prompt is even tokenized
            raise vllm_validation_error(
                f"{limit_param}={max_tokens} cannot be greater than max_model_len={L}. Please request fewer output tokens.",
                limit_param,
                max_tokens,
            )
        ids = token_ids(prompt_text)
        if len(ids) > L:
            # renderers/params.py _token_len_check(): max_input_tokens is the whole max_model_len
            raise vllm_validation_error(
                f"This model's maximum context length is {L} tokens. However, your prompt contains "
                f"{len(ids)} input tokens, which exceeds this limit even without any output tokens. "
                "Please reduce the length of the input prompt.",
                "input_tokens",
                len(ids),
            )
        # entrypoints/serve/utils/api_utils.py get_max_tokens(): what the request asks for, clamped to what fits
        # (prompt + max_tokens beyond max_model_len is not an error; max_tokens alone beyond it was, above).
        max_tokens = min(L - len(ids), max_tokens) if max_tokens is not None else L - len(ids)
        min_tokens = body.get("min_tokens", 0)
        if isinstance(min_tokens, bool) or not isinstance(min_tokens, int):
            raise request_validation_error(
                [
                    {
                        "type": "int_parsing",
                        "loc": ("body", "min_tokens"),
                        "input": min_tokens,
                        "msg": "Input should be a valid integer, unable to parse string as an integer",
                    }
                ]
            )
        raw_t = body.get("temperature")
        temperature = 1.0 if raw_t is None else raw_t
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise request_validation_error(
                [
                    {
                        "type": "float_parsing",
                        "loc": ("body", "temperature"),
                        "input": temperature,
                        "msg": "Input should be a valid number, unable to parse string as a number",
                    }
                ]
            )
        temperature = float(temperature)
        # sampling_params.py SamplingParams._verify_args()
        if not math.isfinite(temperature):
            raise vllm_validation_error(f"temperature must be a finite number, got {temperature}.", "temperature", temperature)
        if temperature < 0.0:
            raise vllm_validation_error(f"temperature must be non-negative, got {temperature}.", "temperature", temperature)
        if temperature > 2.0:
            raise vllm_validation_error(f"temperature must be in [0, 2], got {temperature}.", "temperature", temperature)
        # ... then the token limits, in _verify_args' order (min_tokens against the clamped max_tokens)
        if max_tokens < 1:
            raise vllm_validation_error(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens)
        if min_tokens < 0:
            raise vllm_validation_error(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
        if min_tokens > max_tokens:
            raise vllm_validation_error(f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.")
        seed = body.get("seed")
        workload = rt.knobs.workload or classify(topic)
        rng_seed = seed_for(prompt_text, seed, temperature)
        stop = body.get("stop") or []
        if isinstance(stop, str):
            stop = [stop]
        req = Request(
            request_id=responses_api.request_id()
            if self._responses is not None
            else ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
            prompt_ids=ids,
            max_tokens=max_tokens,
            workload=workload,
            stream=TextStream(workload, topic, rng_seed, bool(body.get("ignore_eos"))),
            stop=list(stop),
            accept_seed=(rng_seed % 10_000_019) / 10_000_019,
        )
        try:
            rt.submit(req)
        except EngineDead:
            # EngineDeadError.CLIENT_MESSAGE (v1/engine/exceptions.py)
            raise ApiError(500, "The server had an error while processing your request.", "InternalServerError") from None
        created = int(time.time())
        if self._messages_api and body.get("stream"):
            self._messages_stream(req, model)
        elif self._responses is not None and body.get("stream"):
            self._responses_stream(req, model, created, self._responses)
        elif body.get("stream"):
            self._stream(req, model, created, chat, body.get("stream_options") or {})
        else:
            self._complete(req, model, created, chat)

    def _wait_events(self, req: Request):
        while True:
            kind, text, n, reason = req.events.get()
            yield kind, text, n, reason
            if kind == "error" or reason:
                return

    def _usage(self, req: Request) -> dict:
        return {
            "prompt_tokens": req.prompt_len,
            "total_tokens": req.prompt_len + len(req.output),
            "completion_tokens": len(req.output),
            "prompt_tokens_details": None,
        }

    def _client_gone(self) -> bool:
        """The client closed its connection (a readable socket with nothing to read: EOF)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _complete(self, req: Request, model: str, created: int, chat: bool) -> None:
        reason = None
        look = time.monotonic() + DISCONNECT_POLL
        try:
            while True:
                try:
                    kind, _text, _n, r = req.events.get(timeout=DISCONNECT_POLL)
                except queue.Empty:
                    kind = None
                if time.monotonic() >= look:
                    look = time.monotonic() + DISCONNECT_POLL
                    # vLLM wraps the non-streaming handlers in @with_cancellation: a client that goes
                    # away cancels the handler and AsyncLLM aborts its request (slot and KV freed)
                    if self._client_gone():
                        self.rt.engine.abort(req)
                        self.close_connection = True
                        return
                if kind is None:
                    continue
                if kind == "error":
                    if self._messages_api:
                        return self._json(500, anthropic_api.error_body(_text))
                    return self._json(500, error_body(500, _text, "InternalServerError"))
                reason = r
                if reason:
                    break
        finally:
            self.rt.finished(req)
        if self._responses is not None:
            obj = self._response_object(req, model, created, self._responses, reason)
        elif self._messages_api:
            obj = anthropic_api.message(req.request_id, model, req.text, reason, req.stop_reason, req.prompt_len, len(req.output))
        elif chat:
            choice = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": req.text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "tool_calls": [],
                    "reasoning_content": None,
                },
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": req.stop_reason,
            }
            obj = {
                "id": req.request_id,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": self._usage(req),
                "prompt_logprobs": None,
                "kv_transfer_params": None,
            }
        else:
            choice = {
                "index": 0,
                "text": req.text,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": req.stop_reason,
                "prompt_logprobs": None,
            }
            obj = {
                "id": req.request_id,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": self._usage(req),
                "kv_transfer_params": None,
            }
        self._json(200, obj)

    def _client_went_away(self, req: Request) -> None:
        """A stream's client closed its connection: vLLM aborts the request (its slot and KV freed)."""
        self.rt.engine.abort(req)
        self.rt.finished(req)
        self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _begin_sse(self) -> None:
        """A 200 server-sent-event stream's head, as uvicorn sends it (chunked, no length)."""
        self.send_response_only(200)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._access(200)

    def _stream(self, req: Request, model: str, created: int, chat: bool, options: dict) -> None:
        self._begin_sse()
        include_usage = bool(options.get("include_usage")) or self.rt.cfg.enable_force_include_usage
        continuous = include_usage and bool(options.get("continuous_usage_stats"))
        obj_type = "chat.completion.chunk" if chat else "text_completion"

        def event(choices, usage=None) -> None:
            obj = {"id": req.request_id, "object": obj_type, "created": created, "model": model, "choices": choices}
            if usage is not None:
                obj["usage"] = usage
            self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

        try:
            if chat:
                event(
                    [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}],
                    self._usage(req) if continuous else None,
                )
            for kind, text, _n, reason in self._wait_events(req):
                if kind == "error":
                    self._chunk(b"data: " + json.dumps(error_body(500, text, "InternalServerError")).encode() + b"\n\n")
                    break
                if not text and not reason:
                    continue
                if chat:
                    # chat_completion/stream_processor.py step(): a choice that finishes with no output at
                    # all (an abort before the first token) sends DeltaMessage() unparsed: `"delta": {}`
                    delta = {"content": text} if text or req.output else {}
                    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
                    if reason:
                        choice["stop_reason"] = req.stop_reason
                else:
                    choice = {
                        "index": 0,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": reason,
                        "stop_reason": req.stop_reason if reason else None,
                    }
                event([choice], self._usage(req) if continuous else None)
            self.rt.finished(req)
            if include_usage and req.finished:
                event([], self._usage(req))
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self._client_went_away(req)

    def _messages_stream(self, req: Request, model: str) -> None:
        """entrypoints/anthropic/serving.py message_stream_converter over the chat stream (usage forced on)."""
        self._begin_sse()
        try:
            self._chunk(anthropic_api.message_start(req.request_id, model, req.prompt_len))
            started, reason = False, None
            for kind, text, _n, r in self._wait_events(req):
                if kind == "error":
                    if started:
                        self._chunk(anthropic_api.block_stop())
                    self._chunk(anthropic_api.error_event(text))
                    break
                if text:
                    if not started:
                        self._chunk(anthropic_api.block_start())
                        started = True
                    self._chunk(anthropic_api.text_delta(text))
                reason = r or reason
            else:
                if started:
                    self._chunk(anthropic_api.block_stop())
                self._chunk(anthropic_api.message_end(reason, req.stop_reason, req.prompt_len, len(req.output)))
            self.rt.finished(req)
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self._client_went_away(req)

    def _response_object(self, req: Request, model: str, created: int, body: dict, reason: str | None) -> dict:
        state = responses_api.status(reason)
        output = [responses_api.output_message(responses_api.item_id(), req.text, state)] if req.text else []
        use = responses_api.usage(req.prompt_len, len(req.output))
        return responses_api.response(req.request_id, body, model, created, state, output, use, req.max_tokens)

    def _responses_stream(self, req: Request, model: str, created: int, body: dict) -> None:
        """responses_stream_generator over the simple path: one output message, its text deltas."""
        self._begin_sse()
        events = responses_api.EventStream()
        try:
            initial = responses_api.response(req.request_id, body, model, created, "in_progress", [], None, req.max_tokens)
            self._chunk(events.opened(initial))
            msg_id, started, reason = responses_api.item_id(), False, None
            for kind, text, _n, r in self._wait_events(req):
                if kind == "error":
                    self._chunk(events.error(text))
                    break
                if text:
                    if not started:
                        self._chunk(events.content_open(msg_id))
                        started = True
                    self._chunk(events.delta(msg_id, text))
                reason = r or reason
            else:
                state = responses_api.status(reason)
                output = []
                if started:
                    self._chunk(events.content_done(msg_id, req.text, state))
                    output = [responses_api.output_message(msg_id, req.text, state)]
                use = responses_api.usage(req.prompt_len, len(req.output))
                final = responses_api.response(req.request_id, body, model, created, state, output, use, req.max_tokens)
                self._chunk(events.finished(final))
            self.rt.finished(req)
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self._client_went_away(req)


def _template_kwargs(body: dict) -> dict:
    kw = body.get("chat_template_kwargs") or {}
    out = {}
    if "enable_thinking" in kw:
        out["enable_thinking"] = bool(kw["enable_thinking"])
    elif "thinking" in kw:
        out["enable_thinking"] = bool(kw["thinking"])
    if "add_generation_prompt" in body:
        out["add_generation_prompt"] = bool(body["add_generation_prompt"])
    return out
