"""The Amazon SQS engine (lanner[sqs]): see engine.py for the data layout and the mapping,
docs/engines/sqs.md for what it can and cannot do."""

from lanner.engines.sqs.connection import SQSOptions
from lanner.engines.sqs.engine import SQSEngine

__all__ = ["SQSEngine", "SQSOptions"]
