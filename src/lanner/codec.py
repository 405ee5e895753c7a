"""Task payloads: how a task's arguments travel in a job's `data`, and back.

A payload is a JSON object, the *envelope*:

    {"v": 1, "args": [...], "kwargs": {...}, "app_data": ...}            JSON (the default)

("kwargs" and "app_data" are written only when not empty and not null; read, each absent
one is `{}` and `None`.)
    {"v": 1, "codec": "pickle", "kid": "k1", "body": "<base64>", "sig": "<hex>"}

Either may hold "headers" too, an object of strings that integrations carry beside the
arguments (a trace's context: `lanner.instruments`); a worker that does not know them
ignores them, and they are not signed: they are metadata, never arguments.
A job of a workflow (`lanner.workflows`) also carries `"wf"`, a JSON object of lanner's
own saying where its inputs come from, in either envelope (the pickle signature covers it).

JSON is the default and the only codec a worker accepts unless told otherwise. Pickle
runs code when loaded, so it is an explicit opt-in that requires an HMAC key: the
signature (HMAC-SHA256) covers the version, jid, task name, queue and body, is checked
with `hmac.compare_digest` before anything is unpickled, and binds the payload to its
job, so a signed payload cannot be replayed into another job or queue. Signing is not
encryption: anyone who can read the store can read the arguments.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from lanner import fastjson
from lanner.checks.values import CodecJSON, utf8_size
from lanner.errors import (
    ArgumentError,
    BadSignature,
    DecodeError,
    MalformedArgument,
    ResultError,
    ResultTooLarge,
)
from lanner.instruments import carried

ENVELOPE_VERSION: Final = 1

# One encoder for every envelope and result: `json.dumps` with options builds a new one
# per call, a third of a small envelope's encoding (a workflow encodes thousands at once).
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True, slots=True)
class Payload:
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    app_data: Any = None
    headers: Mapping[str, str] | None = None
    workflow: Mapping[str, Any] | None = None  # the envelope's "wf": lanner.workflows'


@dataclass(frozen=True, slots=True)
class JobIdentity:
    """What a signature binds a payload to."""

    jid: str
    klass: str
    queue: str


class Codec(Protocol):
    name: str

    def encode(self, payload: Payload, job: JobIdentity) -> str: ...


class JSONCodec:
    """The default: arguments must be JSON values (dict keys str, no NaN)."""

    name = "json"

    def encode(self, payload: Payload, job: JobIdentity) -> str:
        parts = payload.args, payload.kwargs, payload.app_data, payload.headers
        # A plain str (what any codec returns); only the App's own puts carry a CodecJSON.
        return str.__str__(encode_json(*parts, payload.workflow, (job.jid, job.klass, job.queue)))


def encode_json(
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    app_data: Any,
    headers: Mapping[str, str] | None,
    workflow: Mapping[str, Any] | None,
    job: tuple[str, str, str],
) -> CodecJSON:
    """`JSONCodec.encode` of a payload's parts, without making the `Payload` (the App's
    publish path); `job` is (jid, klass, queue), what an error names.

    Its text is a `CodecJSON`: the engine's put check need not read it again (the encoder
    refuses NaN and Infinity, and its ASCII output is JSON that `strict_json` reads). It
    is for the engine's put only: msgspec (`fastjson`), for one, reads no str subclass."""
    # Empty kwargs and a null app_data are left out: every reader of version 1 takes their
    # absence as those values, and a queued job is that much smaller (26 bytes of a no-op's).
    envelope: dict[str, Any] = {"v": ENVELOPE_VERSION, "args": list(args)}
    if kwargs:
        envelope["kwargs"] = dict(kwargs)
    if app_data is not None:
        envelope["app_data"] = app_data
    if headers:
        envelope["headers"] = dict(headers)
    if workflow is not None:
        envelope["wf"] = workflow
    try:
        return CodecJSON(_COMPACT.encode(envelope))
    except (TypeError, ValueError):
        raise _explain(Payload(tuple(args), kwargs, app_data), JobIdentity(*job)) from None
    except RecursionError:
        raise ArgumentError(f"{job[1]}: arguments are nested too deeply for JSON") from None


class SignedPickleCodec:
    """Pickle, signed with HMAC-SHA256. Opt-in: any Python object, for trusted stores only."""

    name = "pickle"

    def __init__(self, key: bytes, key_id: str = "default") -> None:
        if not isinstance(key, bytes) or len(key) < 16:
            raise MalformedArgument("the pickle codec needs an HMAC key of at least 16 bytes")
        self._key = key
        self.key_id = key_id

    def sign(self, body: str, job: JobIdentity, workflow: str | None = None) -> str:
        parts = (str(ENVELOPE_VERSION), job.jid, job.klass, job.queue, body)
        message = "\n".join(parts if workflow is None else (*parts, workflow))
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def encode(self, payload: Payload, job: JobIdentity) -> str:
        try:
            raw = pickle.dumps((payload.args, dict(payload.kwargs), payload.app_data))
        except Exception as error:
            raise ArgumentError(f"arguments of {job.klass} cannot be pickled: {error}") from None
        body = base64.b64encode(raw).decode("ascii")
        workflow = _workflow_text(payload.workflow)
        envelope: dict[str, Any] = {
            "v": ENVELOPE_VERSION,
            "codec": self.name,
            "kid": self.key_id,
            "body": body,
            "sig": self.sign(body, job, workflow),
        }
        if payload.headers:
            envelope["headers"] = dict(payload.headers)
        if payload.workflow is not None:
            envelope["wf"] = payload.workflow
        return json.dumps(envelope, separators=(",", ":"))

    def load(self, envelope: Mapping[str, Any], job: JobIdentity) -> Payload:
        body, sig = envelope.get("body"), envelope.get("sig")
        if not isinstance(body, str) or not isinstance(sig, str):
            raise BadSignature("signed payload without a body or signature")
        if envelope.get("kid") != self.key_id:
            raise BadSignature(f"payload signed with unknown key {envelope.get('kid')!r}")
        workflow = envelope.get("wf")
        if not hmac.compare_digest(sig, self.sign(body, job, _workflow_text(workflow))):
            raise BadSignature("payload signature does not match: not loaded")
        try:
            args, kwargs, app_data = pickle.loads(base64.b64decode(body, validate=True))  # noqa: S301 - signature checked above
        except (binascii.Error, pickle.UnpicklingError, ValueError, TypeError) as error:
            raise DecodeError(f"signed payload does not unpickle: {error}") from None
        return Payload(tuple(args), kwargs, app_data, _headers(envelope), workflow)


def _workflow_text(workflow: Any) -> str | None:
    """The workflow object as the signature covers it (None: the job has none)."""
    if workflow is None:
        return None
    return json.dumps(workflow, separators=(",", ":"), sort_keys=True)


def encode_result(value: Any, task: str, limit: int) -> str:
    """A task's return value as the JSON text its job keeps, or `ResultError` saying why not:
    `ResultTooLarge` for text over `limit` UTF-8 bytes (the engine's `max_data_bytes`),
    which the engine would refuse when the job is completed."""
    try:
        text = _COMPACT.encode(value)
    except (TypeError, ValueError, RecursionError) as error:
        raise ResultError(
            f"{task} returned {type(value).__name__}, which cannot be kept as JSON: {error}"
        ) from None
    size = utf8_size(text)
    if size > limit:
        raise ResultTooLarge(
            f"{task} returned {type(value).__name__} of {size} bytes as JSON; "
            f"this engine keeps at most {limit}"
        )
    return text


def decode(data: str, job: JobIdentity, pickle_codec: SignedPickleCodec | None = None) -> Payload:
    """Turn a job's data back into a payload, or raise `DecodeError` saying why."""
    try:
        envelope = fastjson.loads(data)
    except (ValueError, RecursionError) as error:
        raise DecodeError(f"data is not JSON that can be read: {error}") from None
    if not isinstance(envelope, dict):
        raise DecodeError(f"data is a JSON {type(envelope).__name__}, not an envelope object")
    if envelope.get("v") != ENVELOPE_VERSION:
        raise DecodeError(f"unknown envelope version {envelope.get('v')!r}")
    codec = envelope.get("codec", "json")
    if codec == "pickle":
        if pickle_codec is None:
            raise BadSignature("pickle payload, but this worker has no pickle codec (HMAC key)")
        return pickle_codec.load(envelope, job)
    if codec != "json":
        raise DecodeError(f"unknown codec {codec!r}")
    args, kwargs = envelope.get("args", []), envelope.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise DecodeError("envelope args must be a list and kwargs an object")
    workflow = envelope.get("wf")
    if workflow is not None and not isinstance(workflow, dict):
        raise DecodeError("envelope wf must be an object")
    return Payload(tuple(args), kwargs, envelope.get("app_data"), _headers(envelope), workflow)


def _headers(envelope: Mapping[str, Any]) -> Mapping[str, str] | None:
    """The envelope's headers, if it has any that are an object of strings (else none:
    what integrations carry is never a reason to refuse a job)."""
    found = envelope.get("headers")
    return None if found is None else carried(found) or None


def _explain(payload: Payload, job: JobIdentity) -> ArgumentError:
    """Name the first argument that JSON cannot carry."""
    named: list[tuple[str, Any]] = [(f"argument {i}", v) for i, v in enumerate(payload.args)]
    named += [(f"keyword argument {k!r}", v) for k, v in payload.kwargs.items()]
    named.append(("app_data", payload.app_data))
    for label, value in named:
        problem = _json_problem(value)
        if problem:
            return ArgumentError(
                f"{job.klass}: {label} {problem}; pass JSON values (str, int, float, bool, "
                "None, list, dict with str keys), or opt in to the signed pickle codec"
            )
    return ArgumentError(f"{job.klass}: arguments are not JSON-serialisable")


def _json_problem(value: Any) -> str | None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        return f"({type(value).__name__}) is not JSON-serialisable: {error}"
    if isinstance(value, Mapping) and not all(isinstance(k, str) for k in value):
        return "has non-str keys, which JSON would turn into strings"
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        for item in value:
            problem = _json_problem(item)
            if problem:
                return problem
    return None
