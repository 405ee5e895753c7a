"""How the SQS engine reaches SQS: URLs, options, one boto3 client per process, requests counted.

URLs: `sqs://REGION?option=value&...` (`sqs://` alone: the region of boto3's usual chain,
AWS_REGION or AWS_DEFAULT_REGION or ~/.aws/config). Options are `SQSOptions`' fields;
credentials come from boto3's usual chain (the environment, ~/.aws, an instance or task
role), never from the URL.

No client crosses a fork: boto3's clients hold connection pools (and threads may be inside
them) that a forked child must not share. `SQSClient` makes its client on first use and
makes a new one in a process whose pid is not its maker's, so each process of a pool has
its own. Every HTTP request the client sends (retries too: SQS bills each) is counted by
API name (`SQSClient.requests`); errors become lanner's (`EngineUnavailable` for a
network or service problem, so that workers wait and retry).
"""

from __future__ import annotations

import collections
import math
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from lanner.errors import ConfigError, EngineUnavailable, MalformedArgument, StoreMisconfigured

try:
    import boto3
    import botocore.config
    import botocore.exceptions
except ModuleNotFoundError as missing:  # pragma: no cover - depends on the installation
    raise ConfigError(
        f"the SQS engine needs boto3 ({missing}): pip install 'lanner[sqs]'"
    ) from None

from lanner.engines.urloptions import options_from_query

__all__ = [
    "SQS_NAME_LIMIT",
    "QueueMissing",
    "SQSClient",
    "SQSDenied",
    "SQSOptions",
    "SQSRefused",
    "impatient",
    "one_shot",
    "parse_url",
]

SQS_NAME_LIMIT: Final = 80
"""SQS's longest queue name: 1 to 80 letters, digits, '-' and '_'."""
MAX_WAIT_SECONDS: Final = 20
"""SQS's longest long poll (WaitTimeSeconds) per ReceiveMessage."""
MAX_VISIBILITY: Final = 43200
"""SQS's longest visibility timeout: 12 hours."""
MESSAGE_SIZE_RANGE: Final = (1024, 1_048_576)
"""SQS's bounds of a queue's MaximumMessageSize, in bytes."""

_PREFIX = re.compile(r"[A-Za-z0-9_-]*")
_REGION = re.compile(r"[a-z0-9-]*")
_MISSING_QUEUE_CODES: Final = frozenset(
    {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"}
)
_DENIED_CODES: Final = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "AuthFailure",
        "IncompleteSignature",
        "InvalidAccessKeyId",
        "InvalidClientTokenId",
        "MissingAuthenticationToken",
        "OptInRequired",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
    }
)
"""SQS's answers to credentials it does not know, or that may not do what was asked:
waiting cannot change them (an HTTP 403 is one too, whatever its code)."""
_XML_ERROR = re.compile(r"<Code>(?P<code>[^<]*)</Code>\s*<Message>(?P<message>[^<]*)</Message>")


@dataclass(frozen=True, slots=True)
class SQSOptions:
    """What the SQS engine is told by its URL's query.

    endpoint_url        SQS's endpoint (default: AWS's for the region): a VPC endpoint,
                        or a local SQS such as moto's server or ElasticMQ.
    prefix              put before every lanner queue's name to make its SQS queue's name
                        (`<prefix><queue>`): an application's or a release's namespace,
                        such as `myapp-v42-`, so that old and new code never share a queue.
    dlq_prefix          put before an SQS queue's name to make its dead-letter queue's
                        (`<dlq_prefix><prefix><queue>`; Kale's `dlq-`).
    visibility_timeout  the lock (SQS's VisibilityTimeout, seconds) of the queues the engine
                        creates, until `config_set("<queue>-heartbeat", ...)` changes it.
    max_message_bytes   the MaximumMessageSize of the queues the engine creates: the
                        largest message `put` sends (256 KiB, SQS's long-standing limit;
                        up to 1 MiB where the endpoint allows).
    counts_cache_sec    how long `queues()` reuses a queue's counts (each costs a request),
                        corrected meanwhile by what this process's receives and sends
                        show: an empty receive means an empty queue.
    retries             how many times botocore retries a request (throttling, 5xx,
                        connection errors), with its standard backoff.
    connect_timeout     seconds to wait for a connection ...
    read_timeout        ... and for a reply (more than a 20 s long poll).
    profile             a profile of ~/.aws/config to take credentials and region from.
    """

    endpoint_url: str = ""
    prefix: str = ""
    dlq_prefix: str = "dlq-"
    visibility_timeout: int = 60
    max_message_bytes: int = 262_144
    counts_cache_sec: float = 2.0
    retries: int = 4
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    profile: str = ""

    def __post_init__(self) -> None:
        self._check_names()
        self._check_numbers()
        if self.endpoint_url and urlsplit(self.endpoint_url).scheme not in ("http", "https"):
            raise MalformedArgument(
                f"SQS option endpoint_url must be an http:// or https:// URL, not "
                f"{self.endpoint_url!r}"
            )

    def _check_names(self) -> None:
        for name in ("prefix", "dlq_prefix"):
            value = getattr(self, name)
            if _PREFIX.fullmatch(value) is None:
                raise MalformedArgument(
                    f"SQS option {name}={value!r}: only letters, digits, '-' and '_' "
                    "may be part of an SQS queue name"
                )
        if not self.dlq_prefix:
            raise MalformedArgument("SQS option dlq_prefix must not be empty")
        if self.prefix.startswith(self.dlq_prefix):
            raise MalformedArgument(
                f"SQS option prefix={self.prefix!r} starts with dlq_prefix "
                f"{self.dlq_prefix!r}: its queues would be taken for dead-letter queues"
            )
        if len(self.dlq_prefix) + len(self.prefix) >= SQS_NAME_LIMIT:
            raise MalformedArgument(
                f"SQS options dlq_prefix and prefix leave no room for a queue name in "
                f"SQS's {SQS_NAME_LIMIT} characters"
            )

    def _check_numbers(self) -> None:
        if not 0 <= self.visibility_timeout <= MAX_VISIBILITY:
            raise MalformedArgument(
                f"SQS option visibility_timeout must be 0 to {MAX_VISIBILITY} seconds, "
                f"not {self.visibility_timeout}"
            )
        low, high = MESSAGE_SIZE_RANGE
        if not low <= self.max_message_bytes <= high:
            raise MalformedArgument(
                f"SQS option max_message_bytes must be {low} to {high}, not "
                f"{self.max_message_bytes}"
            )
        if not (math.isfinite(self.counts_cache_sec) and self.counts_cache_sec >= 0):
            raise MalformedArgument("SQS option counts_cache_sec must be >= 0 seconds")
        if self.retries < 0:
            raise MalformedArgument("SQS option retries must be >= 0")
        for name in ("connect_timeout", "read_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise MalformedArgument(f"SQS option {name} must be > 0 seconds, not {value}")

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> SQSOptions:
        return options_from_query(cls, query, "SQS")


def parse_url(url: str) -> tuple[str, SQSOptions]:
    """Split an sqs:// URL into its region ("" for boto3's default) and options."""
    if not isinstance(url, str):
        raise MalformedArgument(f"SQS URL must be a str, not {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme != "sqs":
        raise MalformedArgument(f"not an SQS URL (sqs://REGION?...): {url!r}")
    if parts.username or parts.password or parts.port or parts.path.strip("/") or parts.fragment:
        raise MalformedArgument(
            f"bad SQS URL {url!r}: it is sqs://REGION?option=value&...; credentials come "
            "from boto3's usual chain (environment, ~/.aws, roles), never from the URL"
        )
    region = parts.netloc
    if _REGION.fullmatch(region) is None:
        raise MalformedArgument(f"bad AWS region {region!r} in SQS URL {url!r}")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    return region, SQSOptions.from_query(query)


ONE_SHOT_RETRIES: Final = 1
ONE_SHOT_CONNECT_SEC: Final = 2.0


def one_shot(options: SQSOptions) -> SQSOptions:
    """`options` for a command run once (the command line's): an endpoint that cannot be
    reached fails it within seconds (at most ONE_SHOT_RETRIES retry, a connection waited
    for ONE_SHOT_CONNECT_SEC); replies are waited for as long as ever."""
    return replace(
        options,
        retries=min(options.retries, ONE_SHOT_RETRIES),
        connect_timeout=min(options.connect_timeout, ONE_SHOT_CONNECT_SEC),
    )


def impatient(options: SQSOptions, max_wait: float) -> SQSOptions:
    """`options` for requests that give up after about `max_wait` seconds: no retry, and no
    longer a wait for a connection or a reply than that (such an engine never long-polls
    longer than its reply may take)."""
    return replace(
        options,
        retries=0,
        connect_timeout=min(options.connect_timeout, max_wait),
        read_timeout=min(options.read_timeout, max_wait),
    )


class SQSClient:
    """boto3's SQS client for this process, made on first use, with every request counted."""

    def __init__(self, region: str, options: SQSOptions) -> None:
        self.region = region
        self.options = options
        self._client: Any = None
        self._pid = -1
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()

    @property
    def requests(self) -> dict[str, int]:
        """HTTP requests this process sent to SQS through this client, by API name."""
        return dict(self._counts)

    def call(self, operation: str, **arguments: Any) -> dict[str, Any]:
        """Call one SQS API (`operation` as boto3 names its method: `receive_message`)."""
        client = self._current()
        try:
            reply: dict[str, Any] = getattr(client, operation)(**arguments)
        except botocore.exceptions.ClientError as error:
            raise translate(error, operation) from None
        except botocore.exceptions.NoCredentialsError:
            raise EngineUnavailable(
                "no AWS credentials: boto3 found none in the environment "
                "(AWS_ACCESS_KEY_ID, ...), ~/.aws or an instance role"
            ) from None
        except botocore.exceptions.NoRegionError:
            raise ConfigError(
                "no AWS region: name one in the URL (sqs://eu-west-1) or set AWS_REGION"
            ) from None
        except botocore.exceptions.BotoCoreError as error:
            where = self.options.endpoint_url or f"SQS in {self.region or 'the default region'}"
            raise EngineUnavailable(f"cannot reach {where}: {error}") from None
        return reply

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._pid == os.getpid():
            client.close()

    def _current(self) -> Any:
        pid = os.getpid()
        if self._client is not None and self._pid == pid:
            return self._client
        if self._pid != pid:
            # A forked copy: the parent's client (and a lock a thread of the parent may have
            # held at the fork) are left untouched; this process starts its own, and counts
            # its own requests.
            self._lock = threading.Lock()
            self._client = None
            self._counts = collections.Counter()
            self._pid = pid
        with self._lock:
            if self._client is None:
                self._client = self._make()
            return self._client

    def _make(self) -> Any:
        options = self.options
        config = botocore.config.Config(
            retries={"max_attempts": options.retries + 1, "mode": "standard"},
            connect_timeout=options.connect_timeout,
            read_timeout=options.read_timeout,
            max_pool_connections=16,
        )
        try:
            session = boto3.session.Session(profile_name=options.profile or None)
            client = session.client(
                "sqs",
                region_name=self.region or None,
                endpoint_url=options.endpoint_url or None,
                config=config,
            )
        except botocore.exceptions.NoRegionError:
            raise ConfigError(
                "no AWS region: name one in the URL (sqs://eu-west-1) or set AWS_REGION"
            ) from None
        except botocore.exceptions.ProfileNotFound as error:
            raise ConfigError(f"SQS option profile: {error}") from None
        client.meta.events.register("before-send.sqs", self._count)
        return client

    def _count(self, event_name: str = "", **_: Any) -> None:
        # "before-send.sqs.ReceiveMessage": once per HTTP request, retries included.
        self._counts[event_name.rpartition(".")[2]] += 1


class SQSRefused(EngineUnavailable):
    """SQS answered a request with an error (`code`): a service or permission problem the
    engine does not handle itself; workers wait and retry, as for a store that is away."""

    def __init__(self, operation: str, code: str, message: str) -> None:
        super().__init__(f"SQS refused {operation}: {code}: {message}")
        self.operation = operation
        self.code = code


class QueueMissing(SQSRefused):
    """An SQS queue the engine had a URL for, or looked for, does not exist."""


class SQSDenied(StoreMisconfigured):
    """SQS does not know the credentials, or does not let them do what lanner asked (`code`):
    waiting cannot fix it, so workers stop with it."""

    def __init__(self, operation: str, code: str, message: str) -> None:
        super().__init__(
            f"SQS refused {operation}: {code}: {message}: give lanner credentials that "
            "SQS accepts (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, a role) "
            "with permission for its queues (sqs:*)"
        )
        self.operation = operation
        self.code = code
        self.reason = message

    def __reduce__(self) -> tuple[Any, ...]:  # sent from a worker process to its supervisor
        return (type(self), (self.operation, self.code, self.reason))


def translate(error: Any, operation: str) -> SQSRefused | SQSDenied:
    """A ClientError of SQS as lanner's error."""
    details = error.response.get("Error", {})
    code = str(details.get("Code", ""))
    message = str(details.get("Message", "")) or str(error)
    # An XML error body to a JSON request (moto's, ElasticMQ's): its code and message.
    found = _XML_ERROR.search(message)
    if found is not None:
        code, message = found["code"], found["message"]
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code in _DENIED_CODES or status == 403:
        return SQSDenied(operation, code, message)
    if code in _MISSING_QUEUE_CODES:
        return QueueMissing(operation, code, message)
    return SQSRefused(operation, code, message)
