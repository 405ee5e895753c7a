"""Integrations with frameworks lanner does not depend on, each an optional extra
(docs/integrations.md): `django`, Django's task framework served by lanner."""
