"""Integrations with what applications around lanner use, each an optional extra
(docs/integrations.md):

    otel.py      OpenTelemetry: a span per publish, the trace carried in the job, a span
                 per run continuing it (`pip install 'lanner[otel]'`)
    sentry.py    Sentry: task errors reported with their job's context (`lanner[sentry]`)
    django/      Django's task framework served by lanner (`lanner[django]`)

The first two hook into an App through `lanner.instruments`.
"""
