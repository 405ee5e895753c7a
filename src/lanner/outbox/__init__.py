"""The outbox: jobs published inside the application's transaction where the broker cannot
share it (Redis, SQS), relayed to the broker after the commit.

A publish `within=` a connection to another store than lanner's writes one row per job into
that database's `lanner_outbox` table, in the application's transaction (`rows` says what
a row holds, `sqlite` writes and reads them through `sqlite3`; lanner.contrib.django's
`outbox` through Django's ORM). The pool's relay (`relay`) puts the committed rows into the
broker and deletes them. docs/integrations.md tells the guarantee.
"""
