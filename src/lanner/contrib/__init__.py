"""Integrations with what applications around lanner use, each an optional extra:

    otel.py      OpenTelemetry: a span per publish, the trace carried in the job, a span
                 per run continuing it (`pip install 'lanner[otel]'`)
    sentry.py    Sentry: task errors reported with their job's context (`lanner[sentry]`)

Each hooks into an App through `lanner.instruments`; docs/integrations.md shows them.
"""
