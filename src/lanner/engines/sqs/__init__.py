"""The Amazon SQS engine (lanner[sqs]): see engine.py for the data layout and the mapping,
docs/engines/sqs.md for what it can and cannot do.

Its modules, each with one job (after `<-`: the parts it is given):
- engine.py      `SQSEngine`: the hooks; makes the parts below and hands each its own
- connection.py  URLs, `SQSOptions`, one boto3 client per process, requests counted, errors
- queues.py      the SQS queues behind lanner's: names, URLs, attributes, made on first use
- counts.py      queue counts reused briefly, corrected by what receives and sends show
- messages.py    what a message carries: a job's body, a dead letter, a foreign message kept
- receipts.py    the receipts of the messages this process holds (popped, not settled)
- batches.py     SQS's batch calls: 10 entries and a size budget a call, partial failures
- outbox.py      `Outbox`: sending jobs (with delays) and dead letters <- client, queues, counts
- receive.py     `Receiver`: pop, and the messages a pop settles itself <- client, queues,
                 counts, receipts, outbox
"""

from lanner.engines.sqs.connection import SQSOptions
from lanner.engines.sqs.engine import SQSEngine

__all__ = ["SQSEngine", "SQSOptions"]
