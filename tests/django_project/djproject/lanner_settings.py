"""lanner's settings for the test project's workers (LANNER_SETTINGS_MODULE): retries after
a twentieth of a second, so that a test sees them within its deadline."""

RETRY_DELAY_MULTIPLE_SEC = 0.05
RETRY_DELAY_MAX_SEC = 0.2
